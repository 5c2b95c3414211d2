#pragma once
/// \file
/// Numbers as a user types them, for option defaults in --help and for config files, and sizes
/// as a user reads them in messages.

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <system_error>

namespace pets {

/// `value` as a user would type it: the shortest text that reads back as exactly `value`
/// (std::to_chars' round-trip guarantee), in plain decimal from 0.1 up to 1e16 ("0.8", "512",
/// "0.25") and in scientific notation outside it, exponent without sign or padding ("3e-2",
/// "1e-4", "2.5e20"). Not "0.80000000000000004", which is what printing 17 digits gives.
inline std::string format_number(double value) {
  const double magnitude = std::fabs(value);
  const bool scientific =
      std::isfinite(value) && value != 0.0 && (magnitude < 0.1 || magnitude >= 1e16);
  char text[64];
  const std::to_chars_result r =
      std::to_chars(text, text + sizeof text, value,
                    scientific ? std::chars_format::scientific : std::chars_format::fixed);
  if (r.ec != std::errc()) return std::to_string(value);  // cannot happen: 64 chars suffice
  std::string s(text, r.ptr);
  const std::size_t e = s.find('e');
  if (e == std::string::npos) return s;
  // to_chars writes printf's exponent ("3e-02", "2.5e+20"); a user writes "3e-2", "2.5e20".
  std::string exponent = s.substr(e + 1);
  const bool negative = exponent[0] == '-';
  if (exponent[0] == '-' || exponent[0] == '+') exponent.erase(0, 1);
  exponent.erase(0, std::min(exponent.find_first_not_of('0'), exponent.size() - 1));
  return s.substr(0, e + 1) + (negative ? "-" : "") + exponent;
}

/// "1 epoch", "2 epochs", "0 epochs": `count` and the noun in its number. `plural` defaults to
/// `singular` + "s".
inline std::string count_text(long long count, const std::string& singular,
                              const std::string& plural = "") {
  return std::to_string(count) + " " +
         (count == 1       ? singular
          : plural.empty() ? singular + "s"
                           : plural);
}

/// `bytes` as a size in messages: "1.70 GiB" from 1 GiB up, "9.16 MiB" below it (two decimals,
/// binary units).
inline std::string byte_size_text(std::int64_t bytes) {
  const bool gib = bytes >= (std::int64_t{1} << 30);
  char text[48];
  std::snprintf(text, sizeof text, "%.2f %s",
                static_cast<double>(bytes) / static_cast<double>(gib ? 1 << 30 : 1 << 20),
                gib ? "GiB" : "MiB");
  return text;
}

}  // namespace pets
