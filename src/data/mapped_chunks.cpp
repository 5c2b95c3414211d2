#include "pets/data/mapped_chunks.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "pets/data/h5.hpp"

namespace pets::data {

namespace {
#if defined(__SSE2__)
/// The sums of `groups` * 8 big-endian 16-bit words from `data`, as HDF5's loop would add them
/// to zero sums: s1 = sum of w[i], s2 = sum of (m - i) * w[i] for m = 8 * groups, modulo 2^32
/// (as HDF5's own uint32 sums). Eight lanes each keep a sum of their words (a) and a sum of
/// those running sums (b); word 8k + l then counts 8 * (groups - k) - l times in s2.
void fletcher_groups(const std::uint8_t* data, std::size_t groups, std::uint32_t& s1,
                     std::uint32_t& s2) {
  const __m128i zero = _mm_setzero_si128();
  __m128i a_lo = zero, a_hi = zero, b_lo = zero, b_hi = zero;
  for (std::size_t k = 0; k < groups; ++k) {
    __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(data + 16 * k));
    v = _mm_or_si128(_mm_slli_epi16(v, 8), _mm_srli_epi16(v, 8));  // big-endian words
    a_lo = _mm_add_epi32(a_lo, _mm_unpacklo_epi16(v, zero));
    a_hi = _mm_add_epi32(a_hi, _mm_unpackhi_epi16(v, zero));
    b_lo = _mm_add_epi32(b_lo, a_lo);
    b_hi = _mm_add_epi32(b_hi, a_hi);
  }
  alignas(16) std::uint32_t a[8], b[8];
  _mm_store_si128(reinterpret_cast<__m128i*>(a), a_lo);
  _mm_store_si128(reinterpret_cast<__m128i*>(a + 4), a_hi);
  _mm_store_si128(reinterpret_cast<__m128i*>(b), b_lo);
  _mm_store_si128(reinterpret_cast<__m128i*>(b + 4), b_hi);
  std::uint32_t sa = 0, sb = 0, la = 0;
  for (std::uint32_t l = 0; l < 8; ++l) {
    sa += a[l];
    sb += b[l];
    la += l * a[l];
  }
  s1 = sa;
  s2 = 8 * sb - la;
}
#endif
}  // namespace

std::uint32_t fletcher32(const std::uint8_t* data, std::size_t bytes) {
  // Within a block of 360 words neither sum can pass 2^32 (sum1 < 2^16 + 360 * 2^16 after a fold),
  // and sums modulo 2^32 add up the same in any grouping: so the sums are HDF5's exactly,
  // including which of 0 and 0xffff a fold leaves.
  std::uint32_t sum1 = 0, sum2 = 0;
  const auto fold = [](std::uint32_t v) { return (v & 0xffffu) + (v >> 16); };
  for (std::size_t words = bytes / 2; words > 0;) {
    const std::size_t block = std::min<std::size_t>(words, 360);
    words -= block;
    std::size_t rest = block;
#if defined(__SSE2__)
    if (const std::size_t groups = block / 8; groups > 0) {
      std::uint32_t s1 = 0, s2 = 0;
      fletcher_groups(data, groups, s1, s2);
      sum2 += static_cast<std::uint32_t>(8 * groups) * sum1 + s2;
      sum1 += s1;
      data += 16 * groups;
      rest -= 8 * groups;
    }
#endif
    for (const std::uint8_t* end = data + 2 * rest; data != end; data += 2) {
      sum1 += (static_cast<std::uint32_t>(data[0]) << 8) | data[1];
      sum2 += sum1;
    }
    sum1 = fold(sum1);
    sum2 = fold(sum2);
  }
  if (bytes % 2 != 0) {
    sum1 += static_cast<std::uint32_t>(data[0]) << 8;
    sum2 += sum1;
    sum1 = fold(sum1);
    sum2 = fold(sum2);
  }
  return (fold(sum2) << 16) | fold(sum1);
}

bool fletcher32_matches(const std::uint8_t* chunk, std::size_t data_bytes) {
  const std::uint8_t* s = chunk + data_bytes;
  const std::uint32_t stored =
      static_cast<std::uint32_t>(s[0]) | static_cast<std::uint32_t>(s[1]) << 8 |
      static_cast<std::uint32_t>(s[2]) << 16 | static_cast<std::uint32_t>(s[3]) << 24;
  const std::uint32_t sum = fletcher32(chunk, data_bytes);
  const std::uint32_t swapped = ((sum & 0x00ff00ffu) << 8) | ((sum >> 8) & 0x00ff00ffu);
  return stored == sum || stored == swapped;
}

std::unique_ptr<MappedChunks> MappedChunks::open(hid_t file, hid_t dataset, std::uint64_t bytes,
                                                 std::atomic<std::int64_t>& verified,
                                                 std::atomic<std::int64_t>& damaged) {
  H5Id dcpl(H5Dget_create_plist(dataset));
  H5Id type(H5Dget_type(dataset));
  hsize_t chunk = 0;
  unsigned flags = 0;
  std::size_t values = 0;
  // Only the Fletcher32 filter, whose stored chunk is the data and its sum: any other filter
  // (compression, shuffling) must go through HDF5's pipeline. One-byte elements: dataset
  // offsets are byte offsets.
  if (!dcpl.valid() || !type.valid() || H5Tget_size(type.get()) != 1 ||
      H5Pget_layout(dcpl.get()) != H5D_CHUNKED || H5Pget_chunk(dcpl.get(), 1, &chunk) != 1 ||
      chunk == 0 || H5Pget_nfilters(dcpl.get()) != 1 ||
      H5Pget_filter2(dcpl.get(), 0, &flags, &values, nullptr, 0, nullptr, nullptr) !=
          H5Z_FILTER_FLETCHER32)
    return nullptr;
  // HDF5's own descriptor (the sec2 driver's int): the very file it validated.
  H5Id fapl(H5Fget_access_plist(file));
  void* handle = nullptr;
  if (!fapl.valid() || H5Pget_driver(fapl.get()) != H5FD_SEC2 ||
      H5Fget_vfd_handle(file, fapl.get(), &handle) < 0 || handle == nullptr)
    return nullptr;
  const int fd = *static_cast<int*>(handle);
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size <= 0) return nullptr;
  const auto file_bytes = static_cast<std::uint64_t>(st.st_size);
  std::unique_ptr<MappedChunks> mapped(new MappedChunks());
  mapped->chunk_ = chunk;
  mapped->address_.assign(static_cast<std::size_t>((bytes + chunk - 1) / chunk), kNoChunk);
  const std::size_t words = (mapped->address_.size() + 63) / 64;
  mapped->verified_bits_ = std::make_unique<std::atomic<std::uint64_t>[]>(words);
  for (std::size_t w = 0; w < words; ++w)
    mapped->verified_bits_[w].store(0, std::memory_order_relaxed);
  mapped->verified_ = &verified;
  mapped->damaged_ = &damaged;
  // By coordinate: one index lookup per chunk (by number, HDF5 walks the index each time).
  // A chunk qualifies when the filter was applied (mask 0) and it is stored as the chunk's
  // bytes and the 4-byte sum, inside the file.
  for (std::size_t k = 0; k < mapped->address_.size(); ++k) {
    const hsize_t offset = static_cast<hsize_t>(k) * chunk;
    hsize_t size = 0;
    haddr_t address = HADDR_UNDEF;
    unsigned mask = ~0u;
    if (H5Dget_chunk_info_by_coord(dataset, &offset, &mask, &address, &size) >= 0 &&
        address != HADDR_UNDEF && mask == 0 && size == chunk + 4 && address <= file_bytes &&
        size <= file_bytes - address)
      mapped->address_[k] = address;
  }
  void* map = mmap(nullptr, static_cast<std::size_t>(file_bytes), PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return nullptr;
  mapped->map_ = static_cast<const std::uint8_t*>(map);
  mapped->map_bytes_ = static_cast<std::size_t>(file_bytes);
  return mapped;
}

MappedChunks::~MappedChunks() {
  if (map_ != nullptr) munmap(const_cast<std::uint8_t*>(map_), map_bytes_);
}

bool MappedChunks::is_checked(std::uint64_t k) const {
  return (verified_bits_[k / 64].load(std::memory_order_acquire) &
          (std::uint64_t{1} << (k % 64))) != 0;
}

bool MappedChunks::check(std::uint64_t k, bool* first) const {
  if (!fletcher32_matches(map_ + address_[k], static_cast<std::size_t>(chunk_))) return false;
  const std::uint64_t bit = std::uint64_t{1} << (k % 64);
  const bool counted = (verified_bits_[k / 64].fetch_or(bit, std::memory_order_acq_rel) & bit) == 0;
  if (counted) verified_->fetch_add(1, std::memory_order_relaxed);
  if (first != nullptr) *first = counted;
  return true;
}

bool MappedChunks::checked(std::uint64_t k) const {
  if (is_checked(k) || check(k)) return true;
  damaged_->fetch_add(1, std::memory_order_relaxed);
  return false;
}

MappedChunks::Copied MappedChunks::copy(std::uint64_t start, std::uint64_t stride,
                                        std::uint64_t count, std::uint64_t block,
                                        std::uint8_t* dst) const {
  // A box's rows mostly lie in the chunk of the row before: that chunk is looked up once.
  std::uint64_t good = kNoChunk;
  for (std::uint64_t r = 0; r < count; ++r) {
    std::uint64_t pos = start + r * stride;
    for (std::uint64_t left = block; left > 0;) {
      const std::uint64_t k = pos / chunk_, within = pos - k * chunk_;
      if (k != good) {
        if (k >= address_.size() || address_[k] == kNoChunk) return Copied::kNotPlaced;
        if (!checked(k)) return Copied::kDamaged;
        good = k;
      }
      const std::uint64_t n = std::min(left, chunk_ - within);
      std::memcpy(dst, map_ + address_[k] + within, n);
      dst += n;
      pos += n;
      left -= n;
    }
  }
  return Copied::kDone;
}

std::int64_t MappedChunks::verify(std::uint64_t begin, std::uint64_t bytes,
                                  const std::atomic<bool>& stop) const {
  if (bytes == 0) return 0;
  const auto page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  std::int64_t counted = 0;
  for (std::uint64_t k = begin / chunk_; k <= (begin + bytes - 1) / chunk_; ++k) {
    if (stop.load(std::memory_order_relaxed)) return counted;
    if (k >= address_.size() || address_[k] == kNoChunk || is_checked(k)) continue;
#if defined(MADV_POPULATE_READ)
    // One call maps the chunk's pages (reading them from disk when not cached) instead of a
    // page fault per 16 pages in the check; if it fails, the check faults them in as before.
    const std::uint64_t from = address_[k] / page * page;
    (void)madvise(const_cast<std::uint8_t*>(map_) + from,
                  static_cast<std::size_t>(address_[k] + chunk_ + 4 - from), MADV_POPULATE_READ);
#else
    (void)page;
#endif
    bool first = false;
    if (check(k, &first) && first) ++counted;
  }
  return counted;
}

}  // namespace pets::data
