// The options' values as a user types them: --max-lr's list and the names of the enums' values
// (pets/train/options/options.hpp).
#include <algorithm>
#include <charconv>
#include <cmath>

#include "pets/train/options/options.hpp"
#include "pets/util/error.hpp"
#include "pets/util/number_text.hpp"

namespace pets::train {

std::vector<double> parse_max_lr(const std::string& text) {
  std::vector<double> values;
  std::size_t begin = 0;
  for (;;) {
    const std::size_t end = std::min(text.find(',', begin), text.size());
    const std::string item = text.substr(begin, end - begin);
    const std::string where = "--max-lr '" + text + "'";
    if (item.empty())
      throw UsageError(where + (text.empty() ? ": no value" : ": an empty value in the list"));
    double value = 0.0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (ec != std::errc() || ptr != item.data() + item.size())
      throw UsageError(where + ": '" + item + "' is not a number");
    if (!std::isfinite(value) || value <= 0)
      throw UsageError(where + ": learning rates must be positive, got " + item);
    if (std::find(values.begin(), values.end(), value) != values.end())
      throw UsageError(where + ": " + item + " is given twice");
    values.push_back(value);
    if (end == text.size()) return values;
    begin = end + 1;
  }
}

std::string max_lr_text(const std::vector<double>& values) {
  std::string text;
  for (const double v : values) text += (text.empty() ? "" : ",") + format_number(v);
  return text;
}

std::string to_string(MixedPrecision value) {
  switch (value) {
    case MixedPrecision::kNo:
      return "no";
    case MixedPrecision::kBf16:
      return "bf16";
    case MixedPrecision::kFp16:
      return "fp16";
  }
  return "?";
}

std::string to_string(BnMode value) { return value == BnMode::kTrain ? "train" : "eval"; }

std::string to_string(Unfreeze value) {
  switch (value) {
    case Unfreeze::kNone:
      return "none";
    case Unfreeze::kLayer4:
      return "layer4";
    case Unfreeze::kLayer3:
      return "layer3";
    case Unfreeze::kLayer2:
      return "layer2";
    case Unfreeze::kLayer1:
      return "layer1";
    case Unfreeze::kAll:
      return "all";
  }
  return "?";
}

std::string to_string(DeviceChoice value) {
  switch (value) {
    case DeviceChoice::kAuto:
      return "auto";
    case DeviceChoice::kCpu:
      return "cpu";
    case DeviceChoice::kCuda:
      return "cuda";
  }
  return "?";
}

std::string to_string(ResumeMode value) {
  switch (value) {
    case ResumeMode::kNo:
      return "no";
    case ResumeMode::kYes:
      return "yes";
    case ResumeMode::kAuto:
      return "auto";
  }
  return "?";
}

std::string to_string(InputChoice value) {
  switch (value) {
    case InputChoice::kAuto:
      return "auto";
    case InputChoice::kCpu:
      return "cpu";
    case InputChoice::kDevice:
      return "device";
  }
  return "?";
}

std::string to_string(ResidentChoice value) {
  switch (value) {
    case ResidentChoice::kAuto:
      return "auto";
    case ResidentChoice::kOn:
      return "on";
    case ResidentChoice::kOff:
      return "off";
  }
  return "?";
}

}  // namespace pets::train
