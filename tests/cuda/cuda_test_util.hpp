#pragma once
/// What the CUDA tests share: TF32 off for an fp32 reference.

#include <ATen/Context.h>

namespace pets::test {

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
