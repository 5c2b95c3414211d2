#include "pets/train/state/checkpoint_names.hpp"

#include <cstring>
#include <limits>

namespace pets::train {
namespace {

const char* const kPrefix = "ckpt-";
const char* const kSuffix = ".safetensors";

/// Reads, at `pos` of `text`, the literal `word`; advances `pos` past it.
bool read_word(const std::string& text, std::size_t& pos, const char* word) {
  const std::size_t n = std::strlen(word);
  if (text.compare(pos, n, word) != 0) return false;
  pos += n;
  return true;
}

/// Reads, at `pos` of `text`, a number from 0 to `max` as std::to_string writes it; advances
/// `pos` past it.
bool read_number(const std::string& text, std::size_t& pos, int64_t max, int64_t& value) {
  const std::size_t begin = pos;
  value = 0;
  for (; pos < text.size() && text[pos] >= '0' && text[pos] <= '9'; ++pos) {
    const int digit = text[pos] - '0';
    if (value > (max - digit) / 10) return false;
    value = value * 10 + digit;
  }
  return pos > begin && (text[begin] != '0' || pos == begin + 1);
}

constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();

}  // namespace

std::string checkpoint_file_name(int64_t index) {
  return kPrefix + std::to_string(index) + kSuffix;
}

std::optional<int64_t> parse_checkpoint_file_name(const std::string& name) {
  std::size_t pos = 0;
  int64_t index = 0;
  if (read_word(name, pos, kPrefix) && read_number(name, pos, kMaxInt64, index) &&
      read_word(name, pos, kSuffix) && pos == name.size())
    return index;
  return std::nullopt;
}

std::string shard_file_name(const ShardKey& key) {
  return kPrefix + std::to_string(key.index) + ".epoch-" + std::to_string(key.epoch) + ".step-" +
         std::to_string(key.step) + ".rank-" + std::to_string(key.rank) + kSuffix;
}

std::optional<ShardKey> parse_shard_file_name(const std::string& name) {
  std::size_t pos = 0;
  ShardKey key;
  int64_t rank = 0;
  if (read_word(name, pos, kPrefix) && read_number(name, pos, kMaxInt64, key.index) &&
      read_word(name, pos, ".epoch-") && read_number(name, pos, kMaxInt64, key.epoch) &&
      read_word(name, pos, ".step-") && read_number(name, pos, kMaxInt64, key.step) &&
      read_word(name, pos, ".rank-") &&
      read_number(name, pos, std::numeric_limits<int>::max(), rank) &&
      read_word(name, pos, kSuffix) && pos == name.size()) {
    key.rank = static_cast<int>(rank);
    return key;
  }
  return std::nullopt;
}

}  // namespace pets::train
