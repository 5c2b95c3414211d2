# Finds every dependency of pets_train: LibTorch as the target pets_torch, NCCL (optional) as
# pets_nccl, the rest through PetsHostDependencies.cmake. Each area library links the ones it
# uses (src/<area>/CMakeLists.txt).

# What a LibTorch's config (and our NCCL search beside it) leaves in the cache; forgotten when the
# build folder switches to another LibTorch, or the old one's libraries would be reused.
set(PETS_TORCH_CACHED TORCH_LIBRARY c10_LIBRARY C10_CUDA_LIBRARY CAFFE2_NVRTC_LIBRARY Caffe2_DIR
                      kineto_LIBRARY NCCL_INCLUDE_DIR NCCL_LIBRARY)
if(DEFINED PETS_TORCH_DIR_USED AND NOT "${Torch_DIR}" STREQUAL "${PETS_TORCH_DIR_USED}")
  foreach(pets_var IN LISTS PETS_TORCH_CACHED)
    unset(${pets_var} CACHE)
  endforeach()
endif()
find_package(Torch REQUIRED)
set(PETS_TORCH_DIR_USED "${Torch_DIR}" CACHE INTERNAL "the LibTorch config of the last configure")
include(PetsHostDependencies)

# One LibTorch: its libraries must lie under the prefix its CMake config was found in. A
# CMAKE_PREFIX_PATH naming only the config's folder (a pip torch's torch.utils.cmake_prefix_path)
# lets find_library take another LibTorch's libraries from the system's paths (Debian's
# libtorch.so), and the build would mix two versions' headers and libraries.
# (Under the prefix as named or with its links resolved: an unzipped LibTorch may be links.)
get_filename_component(pets_prefix "${TORCH_INSTALL_PREFIX}" ABSOLUTE)
get_filename_component(PETS_TORCH_PREFIX "${TORCH_INSTALL_PREFIX}" REALPATH)
foreach(pets_lib IN ITEMS TORCH_LIBRARY c10_LIBRARY C10_CUDA_LIBRARY)
  if(NOT ${pets_lib})
    continue()
  endif()
  get_filename_component(pets_real "${${pets_lib}}" REALPATH)
  string(FIND "${pets_real}" "${PETS_TORCH_PREFIX}/" pets_at_real)
  string(FIND "${${pets_lib}}" "${pets_prefix}/" pets_at)
  if(NOT pets_at EQUAL 0 AND NOT pets_at_real EQUAL 0)
    set(pets_found "${${pets_lib}}")
    # Forget what was found, so that a run with a corrected prefix searches again.
    foreach(pets_var IN LISTS PETS_TORCH_CACHED)
      unset(${pets_var} CACHE)
    endforeach()
    unset(PETS_TORCH_DIR_USED CACHE)
    message(FATAL_ERROR "pets: mixed LibTorch: the CMake config in ${Torch_DIR} belongs to the "
      "LibTorch in ${PETS_TORCH_PREFIX}, but ${pets_lib} is ${pets_found}. Set "
      "CMAKE_PREFIX_PATH to the LibTorch folder itself (the one holding include/, lib/ and "
      "share/cmake/; for a pip torch: python3 -c 'import os, torch; "
      "print(os.path.dirname(torch.__file__))'), or use make -f Makefile.cluster LIBTORCH=...")
  endif()
endforeach()

# Torch's CMake config exposes include paths through TORCH_INCLUDE_DIRS and the `torch` target;
# wrap it so the headers count as system headers (no warnings from LibTorch in our -Wall build).
add_library(pets_torch INTERFACE)
target_link_libraries(pets_torch INTERFACE ${TORCH_LIBRARIES})
target_include_directories(pets_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
# One libstdc++ in the process. A pip wheel's LibTorch libraries export the parts of libstdc++
# they link statically (newer than their build system's libstdc++: std::filesystem, some of
# std::string and the string streams, exception_ptr); the loader binds each symbol to the first
# library in load order that defines it, and LibTorch comes before libstdc++ among a program's
# needed libraries, so the program's own std::filesystem calls ran LibTorch's copy (and crashed).
# Link options precede the objects and libraries: this makes libstdc++ the first needed library.
# (tests/build/test_std_bindings.sh checks the bindings.)
target_link_options(pets_torch INTERFACE "LINKER:--push-state,--no-as-needed,-lstdc++,--pop-state")

# The GPU backend: CUDA runtime and NCCL, optional. Found -> compiled in (PETS_HAVE_NCCL).
set(PETS_HAVE_NCCL OFF)
if(PETS_WITH_NCCL)
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    # A pip torch brings its own NCCL (site-packages/nvidia/nccl, beside torch/), the one its
    # libtorch_cuda loads: use that one rather than the system's, so one NCCL is in the process.
    get_filename_component(pets_wheel_nccl "${PETS_TORCH_PREFIX}/../nvidia/nccl" ABSOLUTE)
    if(EXISTS "${pets_wheel_nccl}/include/nccl.h")
      find_path(NCCL_INCLUDE_DIR nccl.h PATHS ${pets_wheel_nccl}/include NO_DEFAULT_PATH)
      find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 PATHS ${pets_wheel_nccl}/lib
                   NO_DEFAULT_PATH)
    endif()
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME PATH_SUFFIXES include)
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ENV NCCL_HOME PATH_SUFFIXES lib lib64)
    if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      add_library(pets_nccl INTERFACE)
      target_include_directories(pets_nccl SYSTEM INTERFACE ${NCCL_INCLUDE_DIR})
      target_link_libraries(pets_nccl INTERFACE ${NCCL_LIBRARY} CUDA::cudart)
      target_compile_definitions(pets_nccl INTERFACE PETS_HAVE_NCCL=1)
      set(PETS_HAVE_NCCL ON)
      message(STATUS "pets: NCCL backend ON (${NCCL_LIBRARY}, CUDA ${CUDAToolkit_VERSION})")
    endif()
  endif()
endif()
if(NOT PETS_HAVE_NCCL)
  message(STATUS "pets: NCCL backend OFF (CUDA toolkit or NCCL not found); CPU build only")
endif()

# The CUDA tensor paths (CUDA streams, NCCL on device tensors, autocast on the GPU):
# PETS_TORCH_CUDA=AUTO compiles them when LibTorch is a CUDA build (a pip torch, a CUDA LibTorch
# zip; the NCCL parts when NCCL is found too); ON requires both, or configure fails; OFF leaves
# them out.
set(PETS_TORCH_CUDA AUTO CACHE STRING "CUDA tensor paths: AUTO, ON (required) or OFF")
set_property(CACHE PETS_TORCH_CUDA PROPERTY STRINGS AUTO ON OFF)
set(pets_torch_cuda_wanted ${PETS_TORCH_CUDA})
set(pets_torch_is_cuda OFF)
if(TORCH_CUDA_LIBRARIES OR CAFFE2_USE_CUDA)
  set(pets_torch_is_cuda ON)
endif()
if(pets_torch_cuda_wanted STREQUAL "ON" AND NOT (pets_torch_is_cuda AND PETS_HAVE_NCCL))
  message(FATAL_ERROR "pets: PETS_TORCH_CUDA=ON needs a CUDA build of LibTorch (this one, "
    "${Torch_VERSION} in ${PETS_TORCH_PREFIX}, CUDA: ${pets_torch_is_cuda}) and NCCL "
    "(found: ${PETS_HAVE_NCCL})")
endif()
set(PETS_TORCH_CUDA OFF)
if(pets_torch_is_cuda AND NOT pets_torch_cuda_wanted STREQUAL "OFF")
  set(PETS_TORCH_CUDA ON)
  target_compile_definitions(pets_torch INTERFACE PETS_TORCH_CUDA=1)
  # The device input's kernel (src/train/device/cuda/*.cu), compiled by the nvcc of the CUDA toolkit
  # LibTorch found, for PETS_CUDA_ARCHITECTURES (CMake's CUDA_ARCHITECTURES form; the default:
  # A100, A10/A40, L4/L40, H100/H200, and PTX that newer GPUs compile when they load it), against
  # the shared CUDA runtime that LibTorch loads too.
  set(PETS_CUDA_ARCHITECTURES "80-real;86-real;89-real;90" CACHE STRING
      "CUDA architectures of the project's kernels (CMake's CUDA_ARCHITECTURES form)")
  if(NOT CMAKE_CUDA_COMPILER AND CUDAToolkit_NVCC_EXECUTABLE)
    set(CMAKE_CUDA_COMPILER ${CUDAToolkit_NVCC_EXECUTABLE})
  endif()
  set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
  enable_language(CUDA)
endif()
message(STATUS "pets: LibTorch ${Torch_VERSION} in ${PETS_TORCH_PREFIX}, CUDA paths: ${PETS_TORCH_CUDA}")

# Tests under MPI run through mpiexec; as root Open MPI wants to be told that this is intended.
set(PETS_MPIEXEC ${MPIEXEC_EXECUTABLE})
set(PETS_MPIEXEC_PREFLAGS ${MPIEXEC_PREFLAGS})
execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE PETS_MPIEXEC_VERSION
                ERROR_QUIET RESULT_VARIABLE PETS_MPIEXEC_RC)
if(PETS_MPIEXEC_VERSION MATCHES "Open MPI|OpenRTE")
  list(APPEND PETS_MPIEXEC_PREFLAGS --oversubscribe)
endif()
