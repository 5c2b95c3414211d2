#pragma once
/// \file
/// pets_preprocess --list: a CSV file that names the images and their classes, as many image
/// sets come (Kaggle's `train.csv`, a labelling tool's export). Its first line is a header naming
/// the columns `path` and `label`, and optionally `split`, in any order; each further line names
/// one image:
///
///   path,label,split
///   photos/IMG_0001.jpg,cat,train
///   "photos/beach, 2024.png",Maine Coon,eval
///   /data/shared/dog_7.JPG,dog,train
///
/// A path is relative to the list's folder, or absolute. Fields may be quoted ("..." with ""
/// for a quote, commas and line ends inside); lines end in LF or CRLF; a UTF-8 byte order mark
/// and blank lines are passed over. `split` is `train` or `eval` on every line when the column
/// is there: the split is kept as given; without it the seeded split (--split-mode) decides.

#include <string>

#include "pets/data/layout.hpp"

namespace pets::data {

/// Reads the list at `path`: its candidates (in path order, each with its label and, when the
/// list has a split column, its split), and nothing skipped (a listed file that is missing or
/// unreadable is skipped when it is decoded, and named then). Throws pets::UsageError naming the
/// file and the line for a list it cannot read: no header, a header without path or label or with
/// another column, a line with too few or too many fields or an unclosed quote, an empty path or
/// label, a label or path that is not UTF-8, a split other than train or eval, a path listed
/// twice, no image at all, or a class in the evaluation split only.
TreeListing list_csv(const std::string& path);

}  // namespace pets::data
