#include "pets/util/event_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <boost/crc.hpp>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "pets/util/error.hpp"

namespace pets {
namespace {

namespace fs = std::filesystem;

// Protocol buffer wire types.
constexpr unsigned kVarint = 0;
constexpr unsigned kFixed64 = 1;
constexpr unsigned kLengthDelimited = 2;
constexpr unsigned kFixed32 = 5;

void put_varint(std::string& out, std::uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

void put_key(std::string& out, unsigned field, unsigned wire_type) {
  put_varint(out, (field << 3) | wire_type);
}

template <typename T>
void put_little_endian(std::string& out, T value) {
  for (std::size_t i = 0; i < sizeof(T); ++i)
    out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

void put_double(std::string& out, unsigned field, double value) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  put_key(out, field, kFixed64);
  put_little_endian(out, bits);
}

void put_float(std::string& out, unsigned field, float value) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  put_key(out, field, kFixed32);
  put_little_endian(out, bits);
}

void put_bytes(std::string& out, unsigned field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes.data(), bytes.size());
}

/// Event's fields 1 (wall_time) and 2 (step, omitted at 0 as protobuf does for proto3 defaults).
std::string event_header(double wall_time, std::int64_t step) {
  std::string event;
  put_double(event, 1, wall_time);
  if (step != 0) {
    put_key(event, 2, kVarint);
    put_varint(event, static_cast<std::uint64_t>(step));
  }
  return event;
}

/// This host's name as it goes into file names: [A-Za-z0-9._-], others replaced by '_'.
std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == 0) return "unknown-host";
  std::string host(name);
  for (char& c : host) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '.' || c == '-' || c == '_';
    if (!plain) c = '_';
  }
  return host;
}

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t size) {
  // Castagnoli's polynomial 0x1EDC6F41, reflected in and out, initial and final XOR all ones.
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(data, size);
  return crc.checksum();
}

std::uint32_t masked_crc32c(const void* data, std::size_t size) {
  const std::uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tf_record(std::string_view data) {
  std::string record;
  put_little_endian(record, static_cast<std::uint64_t>(data.size()));
  put_little_endian(record, masked_crc32c(record.data(), 8));
  record.append(data.data(), data.size());
  put_little_endian(record, masked_crc32c(data.data(), data.size()));
  return record;
}

std::string file_version_event(double wall_time) {
  std::string event = event_header(wall_time, 0);
  put_bytes(event, 3, "brain.Event:2");
  return event;
}

std::string scalars_event(double wall_time, std::int64_t step, const std::vector<Scalar>& values) {
  std::string summary;
  for (const Scalar& s : values) {
    std::string value;
    put_bytes(value, 1, s.tag);
    put_float(value, 2, s.value);
    put_bytes(summary, 1, value);
  }
  std::string event = event_header(wall_time, step);
  put_bytes(event, 5, summary);
  return event;
}

std::string session_start_event(double wall_time, std::int64_t step) {
  std::string session_log;
  put_key(session_log, 1, kVarint);
  put_varint(session_log, 1);  // SessionLog.START
  std::string event = event_header(wall_time, step);
  put_bytes(event, 7, session_log);
  return event;
}

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

EventFileWriter::EventFileWriter(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) PETS_ERROR("cannot make the folder " + dir + ": " + ec.message());
  const double now = wall_time_now();
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%010lld", static_cast<long long>(std::floor(now)));
  const std::string base = (fs::path(dir) / ("events.out.tfevents." + std::string(seconds) + "." +
                                             host_name() + "." + std::to_string(::getpid())))
                               .string();
  for (int n = 0; fd_ < 0; ++n) {
    path_ = n == 0 ? base : base + "." + std::to_string(n);
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && (errno != EEXIST || n == 1000))
      PETS_ERROR("cannot create " + path_ + ": " + std::strerror(errno));
  }
  try {
    append(file_version_event(now));
  } catch (...) {
    ::close(fd_);
    ::unlink(path_.c_str());
    throw;
  }
}

EventFileWriter::~EventFileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void EventFileWriter::add_scalars(std::int64_t step, const std::vector<Scalar>& values) {
  append(scalars_event(wall_time_now(), step, values));
}

void EventFileWriter::add_session_start(std::int64_t step) {
  append(session_start_event(wall_time_now(), step));
}

void EventFileWriter::append(const std::string& event) {
  // After a failed (possibly partial) write the file ends in a torn record: a record appended
  // after it would be misread, so the file takes none.
  if (fd_ < 0) PETS_ERROR(path_ + ": not written to after an earlier write failed");
  const std::string record = tf_record(event);
  std::size_t done = 0;
  while (done < record.size()) {
    const ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string reason = n < 0 ? std::strerror(errno) : "nothing written";
      ::close(fd_);
      fd_ = -1;
      PETS_ERROR("cannot write " + path_ + ": " + reason);
    }
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace pets
