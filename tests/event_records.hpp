#pragma once
// The tests' reader of TensorBoard event files (pets/util/event_file.hpp): the records, each
// checked against its CRCs, and the few Event fields the writer uses, decoded. Independent of the
// writer's encoder; the real reader (the tensorboard package) is tests/train/test_tensorboard.sh's.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "pets/util/event_file.hpp"

namespace pets::test {

inline std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline std::uint64_t little_endian(const std::string& s, std::size_t at, std::size_t bytes) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < bytes; ++i)
    v |= static_cast<std::uint64_t>(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return v;
}

/// The records of an events file; a torn or damaged record is a test failure.
inline std::vector<std::string> read_records(const std::string& file) {
  std::vector<std::string> records;
  std::size_t at = 0;
  while (at < file.size()) {
    EXPECT_LE(at + 12, file.size()) << "a torn header at " << at;
    if (at + 12 > file.size()) break;
    const std::uint64_t length = little_endian(file, at, 8);
    EXPECT_EQ(little_endian(file, at + 8, 4), masked_crc32c(file.data() + at, 8));
    EXPECT_LE(at + 16 + length, file.size()) << "a torn record at " << at;
    if (at + 16 + length > file.size()) break;
    records.push_back(file.substr(at + 12, length));
    EXPECT_EQ(little_endian(file, at + 12 + length, 4),
              masked_crc32c(file.data() + at + 12, length));
    at += 16 + length;
  }
  return records;
}

/// One Event as the writer makes them.
struct DecodedEvent {
  double wall_time = 0;
  std::int64_t step = 0;
  std::string file_version;
  bool session_start = false;
  std::vector<Scalar> values;
};

/// A protocol buffer message's fields: calls f(field, wire_type, varint, bytes).
template <typename F>
void for_each_field(const std::string& m, F&& f) {
  std::size_t at = 0;
  const auto varint = [&] {
    std::uint64_t v = 0;
    for (int shift = 0; at < m.size(); shift += 7) {
      const auto b = static_cast<unsigned char>(m[at++]);
      v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) break;
    }
    return v;
  };
  while (at < m.size()) {
    const std::uint64_t key = varint();
    const unsigned field = static_cast<unsigned>(key >> 3), type = key & 7;
    if (type == 0) {
      f(field, type, varint(), std::string());
    } else if (type == 1 || type == 5) {
      const std::size_t n = type == 1 ? 8 : 4;
      if (at + n > m.size()) {
        ADD_FAILURE() << "a torn fixed-size field";
        return;
      }
      f(field, type, little_endian(m, at, n), m.substr(at, n));
      at += n;
    } else if (type == 2) {
      const std::uint64_t n = varint();
      f(field, type, 0, m.substr(at, n));
      at += n;
    } else {
      ADD_FAILURE() << "wire type " << type;
      return;
    }
  }
}

inline DecodedEvent decode_event(const std::string& record) {
  DecodedEvent e;
  for_each_field(record, [&](unsigned field, unsigned, std::uint64_t v, const std::string& b) {
    if (field == 1) std::memcpy(&e.wall_time, &v, sizeof e.wall_time);
    if (field == 2) e.step = static_cast<std::int64_t>(v);
    if (field == 3) e.file_version = b;
    if (field == 7)
      for_each_field(b, [&](unsigned f, unsigned, std::uint64_t status, const std::string&) {
        if (f == 1 && status == 1) e.session_start = true;
      });
    if (field == 5)
      for_each_field(b, [&](unsigned f, unsigned, std::uint64_t, const std::string& value) {
        if (f != 1) return;
        Scalar s;
        for_each_field(value, [&](unsigned vf, unsigned, std::uint64_t bits, const std::string& t) {
          if (vf == 1) s.tag = t;
          if (vf == 2) {
            const auto b32 = static_cast<std::uint32_t>(bits);
            std::memcpy(&s.value, &b32, sizeof s.value);
          }
        });
        e.values.push_back(s);
      });
  });
  return e;
}

/// Every event of the file at `path`, decoded.
inline std::vector<DecodedEvent> read_events(const std::string& path) {
  std::vector<DecodedEvent> events;
  for (const std::string& r : read_records(read_all(path))) events.push_back(decode_event(r));
  return events;
}

}  // namespace pets::test
