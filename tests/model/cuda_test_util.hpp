#pragma once
/// What the CUDA tests share: TF32 off for an fp32 reference, and the precisions a test
/// parameterised on them runs under.

#include <ATen/Context.h>
#include <c10/core/ScalarType.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pets::test {

/// The precisions of a forward: fp32 (no autocast), bf16 and fp16 autocast. For a TEST_P on
/// at::ScalarType: `INSTANTIATE_TEST_SUITE_P(Precisions, Suite, ::testing::ValuesIn(kPrecisions),
/// precision_name)`.
inline const std::vector<at::ScalarType> kPrecisions{at::kFloat, at::kBFloat16, at::kHalf};

/// The test-name suffix of a precision: "Fp32", "Bf16", "Fp16".
inline std::string precision_name(const ::testing::TestParamInfo<at::ScalarType>& info) {
  if (info.param == at::kFloat) return "Fp32";
  if (info.param == at::kBFloat16) return "Bf16";
  if (info.param == at::kHalf) return "Fp16";
  return c10::toString(info.param);
}

/// TF32 off for cuDNN and cuBLAS while it lives, so that fp32 references are fp32.
class NoTf32 {
 public:
  NoTf32()
      : cudnn_(at::globalContext().allowTF32CuDNN()),
        cublas_(at::globalContext().allowTF32CuBLAS()) {
    at::globalContext().setAllowTF32CuDNN(false);
    at::globalContext().setAllowTF32CuBLAS(false);
  }
  ~NoTf32() {
    at::globalContext().setAllowTF32CuDNN(cudnn_);
    at::globalContext().setAllowTF32CuBLAS(cublas_);
  }
  NoTf32(const NoTf32&) = delete;
  NoTf32& operator=(const NoTf32&) = delete;

 private:
  bool cudnn_, cublas_;
};

}  // namespace pets::test
