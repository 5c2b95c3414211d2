// store_listing STORE: what a store holds, one line each, read with the project's own reader
// (pets::data::Store), for the script tests: "attribute layout NAME" and "attribute split HOW"
// (empty for a store written before them), "label ID NAME" per label name, then "train LABEL
// PATH" and "eval LABEL PATH" per image (fields separated by tabs; LABEL is the label's name), then
// "skipped PATH REASON" per row of the skipped table.
#include <iostream>

#include "pets/data/store_reader.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: store_listing STORE\n";
    return 2;
  }
  try {
    const pets::data::Store store(argv[1]);
    std::cout << "attribute\tlayout\t" << store.layout() << "\nattribute\tsplit\t"
              << store.split_made() << '\n';
    const auto& names = store.label_names();
    for (std::size_t i = 0; i < names.size(); ++i)
      std::cout << "label\t" << i << '\t' << names[i] << '\n';
    for (const auto kind : {pets::data::SplitKind::kTrain, pets::data::SplitKind::kEval}) {
      const pets::data::SplitIndex& s = store.split(kind);
      for (std::int64_t i = 0; i < s.size(); ++i)
        std::cout << (kind == pets::data::SplitKind::kTrain ? "train\t" : "eval\t")
                  << names.at(static_cast<std::size_t>(s.labels[static_cast<std::size_t>(i)]))
                  << '\t' << s.names[static_cast<std::size_t>(i)] << '\n';
    }
    for (const auto& [path, reason] : store.skipped())
      std::cout << "skipped\t" << path << '\t' << reason << '\n';
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
