#pragma once
/// \file
/// TensorBoard event files, written without TensorFlow. A file is a sequence of TFRecords (the
/// 8-byte little-endian length, the masked CRC-32C of those 8 bytes, the data, the masked
/// CRC-32C of the data), each holding one `Event` protocol buffer, of which the few fields that
/// scalars need are encoded here by hand (tensorflow/core/util/event.proto and
/// framework/summary.proto: Event.wall_time = 1, step = 2, file_version = 3, summary = 5,
/// session_log = 7; Summary.value = 1; Summary.Value.tag = 1, simple_value = 2; SessionLog.status
/// = 1). TensorBoard, tensorboardX and torch.utils.tensorboard read such files as their own.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pets {

/// CRC-32C (Castagnoli, the iSCSI polynomial) of `size` bytes at `data`.
std::uint32_t crc32c(const void* data, std::size_t size);

/// The CRC that TFRecord stores: crc32c rotated right by 15 bits, plus 0xa282ead8.
std::uint32_t masked_crc32c(const void* data, std::size_t size);

/// `data` framed as one TFRecord.
std::string tf_record(std::string_view data);

/// One named scalar of a summary.
struct Scalar {
  std::string tag;  ///< e.g. "train/loss"; TensorBoard groups the tags by the part before '/'
  float value = 0;  ///< Summary.Value.simple_value is a float
};

/// The encoded Event that starts every file: `file_version: "brain.Event:2"`.
std::string file_version_event(double wall_time);
/// The encoded Event of `values` at `step`, one Summary.Value each.
std::string scalars_event(double wall_time, std::int64_t step, const std::vector<Scalar>& values);
/// The encoded Event `session_log { status: START }` at `step`: a run restarted there. Readers
/// that honour it (TensorBoard's EventAccumulator) drop what earlier files hold at `step` and
/// later, which a restarted run writes again.
std::string session_start_event(double wall_time, std::int64_t step);

/// Seconds since the epoch, as Event.wall_time holds them.
double wall_time_now();

/// One events file being written. Every event goes to the file in one write(2) as soon as it is
/// added, so a process killed at any point leaves whole records (a reader ignores a torn last
/// one); nothing is kept in memory.
class EventFileWriter {
 public:
  /// Makes `dir` (and the folders above it) when missing, and in it a new file
  /// `events.out.tfevents.<seconds, 10 digits>.<host>.<pid>` (`.1`, `.2`, ... appended when that
  /// name exists: never an existing file), starting with the file_version event. TensorBoard
  /// reads every such file of a folder as one run, in the order of their names. Throws
  /// pets::Error naming the path.
  explicit EventFileWriter(const std::string& dir);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  const std::string& path() const { return path_; }

  /// Appends `values` at `step` as one event. Throws pets::Error naming the file.
  void add_scalars(std::int64_t step, const std::vector<Scalar>& values);
  /// Appends session_start_event at `step`. Throws pets::Error naming the file.
  void add_session_start(std::int64_t step);

 private:
  void append(const std::string& event);

  std::string path_;
  int fd_ = -1;
};

}  // namespace pets
