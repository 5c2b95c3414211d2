// The backend's CUDA half in a build without CUDA (CMake compiles this file instead of cuda/).
#include "pets/train/device/cuda_parts.hpp"

namespace pets::train {

const CudaParts* cuda_parts() { return nullptr; }

}  // namespace pets::train
