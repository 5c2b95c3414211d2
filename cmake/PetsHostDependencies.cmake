# The dependencies of the LibTorch-free sources (MPI, parallel HDF5, the image codecs,
# Boost.Program_options, nlohmann-json, threads): shared by the main build (PetsDependencies.cmake)
# and the sanitizer build (fuzz/CMakeLists.txt).

find_package(MPI REQUIRED COMPONENTS C CXX)

set(HDF5_PREFER_PARALLEL TRUE)
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR "pets_train needs a parallel (MPI) HDF5; found a serial one at ${HDF5_INCLUDE_DIRS}. "
                      "On Debian: apt-get install libhdf5-openmpi-dev")
endif()
if(NOT TARGET HDF5::HDF5)
  add_library(HDF5::HDF5 INTERFACE IMPORTED)
  target_include_directories(HDF5::HDF5 SYSTEM INTERFACE ${HDF5_C_INCLUDE_DIRS} ${HDF5_INCLUDE_DIRS})
  target_link_libraries(HDF5::HDF5 INTERFACE ${HDF5_C_LIBRARIES} ${HDF5_LIBRARIES})
  target_compile_definitions(HDF5::HDF5 INTERFACE ${HDF5_DEFINITIONS})
endif()

find_package(PkgConfig REQUIRED)
pkg_check_modules(TURBOJPEG REQUIRED IMPORTED_TARGET libturbojpeg)
find_package(PNG REQUIRED)
find_package(GIF REQUIRED)
pkg_check_modules(WEBP REQUIRED IMPORTED_TARGET libwebp)
find_package(Boost REQUIRED COMPONENTS program_options)
find_package(nlohmann_json 3 REQUIRED)
find_package(Threads REQUIRED)
