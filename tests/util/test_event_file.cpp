// TensorBoard event files (pets/util/event_file.hpp): CRC-32C against the published check values,
// the encoded Events and their TFRecord framing byte for byte against the `tensorboard` package's
// own protocol buffers and record writer (make_event_golden.py beside this file printed them),
// and the writer's files: named as TensorBoard finds them, never an existing file, whole records.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "event_records.hpp"
#include "pets/util/error.hpp"
#include "pets/util/event_file.hpp"

namespace {

namespace fs = std::filesystem;
using pets::test::read_all;
using pets::test::read_records;

// From make_event_golden.py (tensorboard 2.21.0).
const std::string kFileVersionEvent(
    "\x09\x00\x00\x00\x00\x00\x00\xf8\x3f\x1a\x0d\x62\x72\x61\x69\x6e\x2e\x45\x76\x65\x6e\x74\x3a"
    "\x32",
    24);
const std::string kScalarsEvent(
    "\x09\x00\x00\x10\x40\xfc\x54\xd9\x41\x10\xac\x02\x2a\x29\x0a\x11\x0a\x0a\x74\x72\x61\x69\x6e"
    "\x2f\x6c\x6f\x73\x73\x15\x00\x00\x00\x3e\x0a\x14\x0a\x0d\x65\x76\x61\x6c\x2f\x61\x63\x63\x75"
    "\x72\x61\x63\x79\x15\x00\x00\xb7\x42",
    55);
const std::string kSessionStartEvent("\x09\x00\x00\x00\x00\x00\x00\x00\x40\x10\x07\x3a\x02\x08\x01",
                                     15);
const std::string kScalarsRecord(
    "\x37\x00\x00\x00\x00\x00\x00\x00\xe7\xe8\xca\x59\x09\x00\x00\x10\x40\xfc\x54\xd9\x41\x10\xac"
    "\x02\x2a\x29\x0a\x11\x0a\x0a\x74\x72\x61\x69\x6e\x2f\x6c\x6f\x73\x73\x15\x00\x00\x00\x3e\x0a"
    "\x14\x0a\x0d\x65\x76\x61\x6c\x2f\x61\x63\x63\x75\x72\x61\x63\x79\x15\x00\x00\xb7\x42\xc7\x10"
    "\x42\x9b",
    71);

std::uint32_t crc_of(const std::string& s) { return pets::crc32c(s.data(), s.size()); }

fs::path fresh_folder(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("pets_events_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

TEST(Crc32c, PublishedCheckValues) {
  // The CRC catalogue's check value, and RFC 3720 (iSCSI) appendix B.4.
  EXPECT_EQ(crc_of("123456789"), 0xE3069283u);
  EXPECT_EQ(crc_of(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc_of(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending.push_back(static_cast<char>(i));
    descending.push_back(static_cast<char>(31 - i));
  }
  EXPECT_EQ(crc_of(ascending), 0x46DD794Eu);
  EXPECT_EQ(crc_of(descending), 0x113FDB5Cu);
  EXPECT_EQ(pets::crc32c(nullptr, 0), 0u);
}

TEST(Crc32c, MaskedAsTfRecordStoresIt) {
  const std::uint32_t crc = crc_of("123456789");
  EXPECT_EQ(pets::masked_crc32c("123456789", 9), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

TEST(Events, EncodedAsProtobufDoes) {
  EXPECT_EQ(pets::file_version_event(1.5), kFileVersionEvent);
  EXPECT_EQ(
      pets::scalars_event(1700000000.25, 300, {{"train/loss", 0.125f}, {"eval/accuracy", 91.5f}}),
      kScalarsEvent);
  EXPECT_EQ(pets::session_start_event(2.0, 7), kSessionStartEvent);
}

TEST(Events, FramedAsTensorBoardsRecordWriterDoes) {
  EXPECT_EQ(pets::tf_record(kScalarsEvent), kScalarsRecord);
}

TEST(EventFileWriter, WritesVersionThenEventsAsWholeRecords) {
  const fs::path dir = fresh_folder("write") / "made" / "here";
  std::string path;
  {
    pets::EventFileWriter writer(dir.string());
    path = writer.path();
    // Written through: the records are in the file before the writer closes.
    writer.add_scalars(3, {{"train/loss", 2.5f}});
    writer.add_session_start(4);
    const std::vector<std::string> records = read_records(read_all(path));
    ASSERT_EQ(records.size(), 3u);
    // The version event's tail (after the wall time) and the others' without their wall times.
    EXPECT_EQ(records[0].substr(9), kFileVersionEvent.substr(9));
    EXPECT_EQ(records[1].substr(9), pets::scalars_event(0, 3, {{"train/loss", 2.5f}}).substr(9));
    EXPECT_EQ(records[2].substr(9), pets::session_start_event(0, 4).substr(9));
    const std::vector<pets::test::DecodedEvent> events = pets::test::read_events(path);
    EXPECT_EQ(events[0].file_version, "brain.Event:2");
    EXPECT_EQ(events[1].step, 3);
    ASSERT_EQ(events[1].values.size(), 1u);
    EXPECT_EQ(events[1].values[0].tag, "train/loss");
    EXPECT_EQ(events[1].values[0].value, 2.5f);
    EXPECT_TRUE(events[2].session_start);
    EXPECT_EQ(events[2].step, 4);
    // Seconds since the epoch, now.
    EXPECT_NEAR(events[1].wall_time, pets::wall_time_now(), 60);
  }
  const std::string name = fs::path(path).filename().string();
  EXPECT_EQ(fs::path(path).parent_path(), dir);
  EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
  // Ten digits of seconds, so that the names sort as the files were made.
  const std::string seconds = name.substr(std::strlen("events.out.tfevents."), 10);
  EXPECT_EQ(seconds.find_first_not_of("0123456789"), std::string::npos) << name;
  EXPECT_EQ(name.substr(name.size() - std::to_string(::getpid()).size() - 1),
            "." + std::to_string(::getpid()));
  fs::remove_all(dir.parent_path().parent_path());
}

TEST(EventFileWriter, NeverReplacesAFile) {
  const fs::path dir = fresh_folder("twice");
  pets::EventFileWriter first(dir.string());
  first.add_scalars(1, {{"a", 1}});
  // A second writer of the same process in the same second finds the first one's name taken.
  pets::EventFileWriter second(dir.string());
  EXPECT_NE(first.path(), second.path());
  EXPECT_EQ(read_records(read_all(first.path())).size(), 2u);
  EXPECT_EQ(read_records(read_all(second.path())).size(), 1u);
  fs::remove_all(dir);
}

TEST(EventFileWriter, RefusesAFileAsFolder) {
  const fs::path dir = fresh_folder("file");
  fs::create_directories(dir);
  std::ofstream(dir / "plain") << "x";
  try {
    pets::EventFileWriter writer((dir / "plain").string());
    FAIL() << "a file taken as the folder";
  } catch (const pets::Error& e) {
    EXPECT_NE(std::string(e.what()).find((dir / "plain").string()), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
