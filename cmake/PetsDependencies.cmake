# Finds every dependency of pets_train: LibTorch as the target pets_torch, NCCL (optional) as
# pets_nccl, the rest through PetsHostDependencies.cmake. Each area library links the ones it
# uses (src/<area>/CMakeLists.txt).

find_package(Torch REQUIRED)
include(PetsHostDependencies)

# Torch's CMake config exposes include paths through TORCH_INCLUDE_DIRS and the `torch` target;
# wrap it so the headers count as system headers (no warnings from LibTorch in our -Wall build).
add_library(pets_torch INTERFACE)
target_link_libraries(pets_torch INTERFACE ${TORCH_LIBRARIES})
target_include_directories(pets_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})

# The GPU backend: CUDA runtime and NCCL, optional. Found -> compiled in (PETS_HAVE_NCCL).
set(PETS_HAVE_NCCL OFF)
if(PETS_WITH_NCCL)
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
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

# A CUDA build of LibTorch (e.g. a 2.x zip through CMAKE_PREFIX_PATH) enables the CUDA tensor paths.
set(PETS_TORCH_CUDA OFF)
if(TORCH_CUDA_LIBRARIES OR CAFFE2_USE_CUDA)
  set(PETS_TORCH_CUDA ON)
  target_compile_definitions(pets_torch INTERFACE PETS_TORCH_CUDA=1)
endif()
message(STATUS "pets: LibTorch ${Torch_VERSION}, CUDA LibTorch: ${PETS_TORCH_CUDA}")

# Tests under MPI run through mpiexec; as root Open MPI wants to be told that this is intended.
set(PETS_MPIEXEC ${MPIEXEC_EXECUTABLE})
set(PETS_MPIEXEC_PREFLAGS ${MPIEXEC_PREFLAGS})
execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE PETS_MPIEXEC_VERSION
                ERROR_QUIET RESULT_VARIABLE PETS_MPIEXEC_RC)
if(PETS_MPIEXEC_VERSION MATCHES "Open MPI|OpenRTE")
  list(APPEND PETS_MPIEXEC_PREFLAGS --oversubscribe)
endif()
