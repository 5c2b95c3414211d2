#include "pets/data/list_file.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "pets/util/error.hpp"

namespace pets::data {

namespace {

/// One record of the file: its fields and the line it starts on (1-based).
struct Record {
  std::vector<std::string> fields;
  std::size_t line = 0;
};

/// Splits CSV text into records (RFC 4180: quoted fields with "" for a quote, line ends inside
/// quotes kept; LF or CRLF between records). Blank lines give no record. Throws UsageError for
/// an unclosed quote or text after a closing quote.
std::vector<Record> parse_records(const std::string& text, const std::string& where) {
  std::vector<Record> records;
  std::size_t i = 0, line = 1;
  if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) i = 3;  // a UTF-8 byte order mark
  const auto bad = [&](std::size_t at, const std::string& what) {
    throw UsageError("pets_preprocess: " + where + ", line " + std::to_string(at) + ": " + what);
  };
  while (i < text.size()) {
    Record r;
    r.line = line;
    std::string field;
    bool any = false;  // the record has a character, or a comma (so it is not a blank line)
    for (;;) {
      if (i < text.size() && text[i] == '"') {
        const std::size_t opened = line;
        ++i;
        for (;;) {
          if (i >= text.size()) bad(opened, "a quoted field is not closed");
          if (text[i] == '"') {
            if (i + 1 < text.size() && text[i + 1] == '"') {
              field += '"';
              i += 2;
              continue;
            }
            ++i;
            break;
          }
          if (text[i] == '\n') ++line;
          field += text[i++];
        }
        any = true;
        if (i < text.size() && text[i] != ',' && text[i] != '\n' &&
            !(text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') &&
            !(text[i] == '\r' && i + 1 == text.size()))
          bad(line, "text after a closing quote");
      }
      while (i < text.size() && text[i] != ',' && text[i] != '\n') {
        if (text[i] == '"') bad(line, "a quote inside an unquoted field (quote the whole field)");
        if (text[i] == '\r' && (i + 1 == text.size() || text[i + 1] == '\n')) {
          ++i;
          continue;
        }
        field += text[i++];
        any = true;
      }
      r.fields.push_back(std::move(field));
      field.clear();
      if (i < text.size() && text[i] == ',') {
        any = true;
        ++i;
        continue;
      }
      break;
    }
    if (i < text.size()) {  // at '\n'
      ++i;
      ++line;
    }
    if (any) records.push_back(std::move(r));
  }
  return records;
}

/// The columns of the header record.
struct Columns {
  std::size_t path = 0, label = 0;
  std::optional<std::size_t> split;
  std::size_t count = 0;
};

Columns header_columns(const Record& header, const std::string& where) {
  const auto bad = [&](const std::string& what) {
    throw UsageError("pets_preprocess: " + where + ", line " + std::to_string(header.line) + ": " +
                     what +
                     " (the header names the columns path, label and optionally "
                     "split, e.g. 'path,label')");
  };
  std::map<std::string, std::size_t> at;
  for (std::size_t k = 0; k < header.fields.size(); ++k) {
    const std::string& name = header.fields[k];
    if (name != "path" && name != "label" && name != "split")
      bad("'" + name + "' is not a column this list can have");
    if (!at.emplace(name, k).second) bad("the column '" + name + "' is named twice");
  }
  if (!at.count("path") || !at.count("label")) bad("the header has no 'path' or no 'label'");
  Columns c;
  c.path = at["path"];
  c.label = at["label"];
  if (at.count("split")) c.split = at["split"];
  c.count = header.fields.size();
  return c;
}

}  // namespace

TreeListing list_csv(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("pets_preprocess: --list " + path + ": cannot be read");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw UsageError("pets_preprocess: --list " + path + ": cannot be read");
  const std::string where = "--list " + path;
  const std::vector<Record> records = parse_records(buffer.str(), where);
  if (records.empty()) throw UsageError("pets_preprocess: " + where + ": the file is empty");
  const Columns columns = header_columns(records[0], where);

  TreeListing listing;
  listing.layout = Layout::kList;
  std::map<std::string, std::size_t> first_line;  // path -> the line it was listed on
  for (std::size_t r = 1; r < records.size(); ++r) {
    const Record& rec = records[r];
    const auto bad = [&](const std::string& what) {
      throw UsageError("pets_preprocess: " + where + ", line " + std::to_string(rec.line) + ": " +
                       what);
    };
    if (rec.fields.size() != columns.count)
      bad(std::to_string(rec.fields.size()) + (rec.fields.size() == 1 ? " field" : " fields") +
          ", the header names " + std::to_string(columns.count));
    TreeCandidate c;
    c.path = rec.fields[columns.path];
    c.label = rec.fields[columns.label];
    if (c.path.empty()) bad("the path is empty");
    if (c.label.empty()) bad("the label is empty");
    if (!is_utf8(c.path)) bad("the path is not UTF-8");
    if (!is_utf8(c.label)) bad("the label is not UTF-8 (it becomes a class name)");
    if (columns.split) {
      const std::string& s = rec.fields[*columns.split];
      if (s == "train")
        c.split = 't';
      else if (s == "eval")
        c.split = 'e';
      else
        bad("the split is '" + s + "', not train or eval");
    }
    if (const auto [it, fresh] = first_line.emplace(c.path, rec.line); !fresh)
      bad(c.path + " is listed again (first on line " + std::to_string(it->second) + ")");
    listing.candidates.push_back(std::move(c));
  }
  if (listing.candidates.empty())
    throw UsageError("pets_preprocess: " + where + ": no image is listed below the header");
  std::sort(listing.candidates.begin(), listing.candidates.end(),
            [](const TreeCandidate& a, const TreeCandidate& b) { return a.path < b.path; });
  if (columns.split) {
    std::set<std::string> trained;
    for (const TreeCandidate& c : listing.candidates)
      if (c.split == 't') trained.insert(c.label);
    std::set<std::string> eval_only;
    for (const TreeCandidate& c : listing.candidates)
      if (c.split == 'e' && !trained.count(c.label)) eval_only.insert(c.label);
    if (!eval_only.empty()) {
      std::string names;
      for (const std::string& l : eval_only) names += (names.empty() ? "" : ", ") + l;
      throw UsageError("pets_preprocess: " + where + ": " + std::to_string(eval_only.size()) +
                       (eval_only.size() == 1 ? " class is" : " classes are") +
                       " in the eval split only, with no training image: " + names);
    }
  }
  return listing;
}

}  // namespace pets::data
