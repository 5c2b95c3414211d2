# The device check's bundle (bench/device_check.sh): what a GPU node without build tools, Debian's
# packages or a network needs besides a python3 with the same torch wheel and an NVIDIA driver.
#
# pets_write_device_manifest(FILE) writes FILE, device_manifest.json: the programs and, for every
# pets_device_step (tests/CMakeLists.txt), the step's name, its test executable, arguments, MPI
# rank count, time limit and ctest labels. bench/device_check.py runs what it lists.
#
# In a CUDA build (PETS_TORCH_CUDA) the install component `device` holds the bundle:
#   cmake --install build-torch2 --component device --prefix STAGE --strip
# installs into STAGE bin/ (the programs, the step tests, device_input_bench, Open MPI's
# orterun/orted), lib/ (every shared library they need except glibc's own, torch's folders and its
# nvidia/ packages: the node's torch brings those), lib/openmpi and lib/pmix (Open MPI's and PMIx's
# components), share/ and etc/ (their help texts and settings), device_manifest.json and MANIFEST
# (what was built from what). cmake/PetsDeviceInstall.cmake does the libraries and Open MPI part.
# The target pets_device_bundle builds everything the component installs. The component is left
# out of a plain `cmake --install` (EXCLUDE_FROM_ALL): only --component device installs it.

# The programs the device check runs besides the step tests.
set(PETS_DEVICE_PROGRAMS pets_train pets_preprocess pets_synth pets_bench device_input_bench)

function(_pets_json_string value out)
  string(REPLACE "\\" "\\\\" value "${value}")
  string(REPLACE "\"" "\\\"" value "${value}")
  set(${out} "\"${value}\"" PARENT_SCOPE)
endfunction()

function(_pets_json_list out)
  set(items "")
  foreach(item IN LISTS ARGN)
    _pets_json_string("${item}" quoted)
    list(APPEND items "${quoted}")
  endforeach()
  list(JOIN items ", " joined)
  set(${out} "[${joined}]" PARENT_SCOPE)
endfunction()

function(pets_write_device_manifest file)
  get_property(steps GLOBAL PROPERTY PETS_DEVICE_STEPS)
  set(tests "")
  foreach(step IN LISTS steps)
    foreach(field TEST TIMEOUT MPI ARGS)
      get_property(${field} GLOBAL PROPERTY PETS_DEVICE_STEP_${step}_${field})
    endforeach()
    get_target_property(labels ${TEST} PETS_TEST_LABELS)
    if(MPI)
      list(PREPEND labels mpi)
    endif()
    _pets_json_list(args_json ${ARGS})
    _pets_json_list(labels_json ${labels})
    list(APPEND tests "    {\"step\": \"${step}\", \"test\": \"${TEST}\", \"executable\": \"bin/$<TARGET_FILE_NAME:${TEST}>\",\n     \"args\": ${args_json}, \"mpi_np\": ${MPI}, \"timeout_s\": ${TIMEOUT}, \"labels\": ${labels_json}}")
  endforeach()
  list(JOIN tests ",\n" tests_json)
  _pets_json_list(programs_json ${PETS_DEVICE_PROGRAMS})
  file(GENERATE OUTPUT ${file} CONTENT "{\n  \"schema\": \"pets_device_manifest/1\",\n  \"programs\": ${programs_json},\n  \"tests\": [\n${tests_json}\n  ]\n}\n")
endfunction()

if(NOT PETS_TORCH_CUDA)
  return()
endif()

# HDF5's read-only S3 driver links libcurl and libcrypto, which bring about 25 more libraries
# (4.9 MB of the bundle compressed: TLS, Kerberos, LDAP, ...). pets reads local files only:
# stand-ins exporting the functions HDF5 imports, with its symbol versions, each returning failure,
# take their place; the driver's open fails if anything ever asks for it.
foreach(stub curl crypto)
  add_library(pets_device_${stub} SHARED ${PROJECT_SOURCE_DIR}/bench/device/${stub}_stub.c)
  set(map ${PROJECT_SOURCE_DIR}/bench/device/${stub}_stub.map)
  target_link_options(pets_device_${stub} PRIVATE "LINKER:--version-script=${map}")
  set_target_properties(pets_device_${stub} PROPERTIES OUTPUT_NAME ${stub} LINK_DEPENDS ${map}
                        LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/device_stubs)
endforeach()
set_target_properties(pets_device_curl PROPERTIES SOVERSION 4)
set_target_properties(pets_device_crypto PROPERTIES SOVERSION 3)

get_property(steps GLOBAL PROPERTY PETS_DEVICE_STEPS)
set(step_tests "")
foreach(step IN LISTS steps)
  get_property(test GLOBAL PROPERTY PETS_DEVICE_STEP_${step}_TEST)
  list(APPEND step_tests ${test})
endforeach()
list(REMOVE_DUPLICATES step_tests)
set(bundle_targets ${PETS_DEVICE_PROGRAMS} ${step_tests})
add_custom_target(pets_device_bundle DEPENDS ${bundle_targets} pets_device_curl pets_device_crypto)

install(TARGETS ${bundle_targets} RUNTIME DESTINATION bin COMPONENT device EXCLUDE_FROM_ALL)
install(TARGETS pets_device_curl pets_device_crypto LIBRARY DESTINATION lib NAMELINK_SKIP
        COMPONENT device EXCLUDE_FROM_ALL)
install(FILES ${PROJECT_BINARY_DIR}/device_manifest.json DESTINATION . COMPONENT device
        EXCLUDE_FROM_ALL)

# Open MPI's launcher and daemon (a singleton MPI_Init forks orted too), its components, help texts
# and settings, and PMIx's: found beside the MPI this build uses (Debian's layout by default).
get_filename_component(pets_orterun "${PETS_MPIEXEC}" REALPATH)
get_filename_component(pets_ompi_bindir "${pets_orterun}" DIRECTORY)
get_filename_component(pets_ompi_prefix "${pets_ompi_bindir}" DIRECTORY)
get_filename_component(pets_ompi_libdir "${MPI_mpi_LIBRARY}" DIRECTORY)
find_path(PETS_DEVICE_OMPI_MCA_DIR mca_ess_singleton.so
          PATHS ${pets_ompi_libdir}/openmpi3 ${pets_ompi_libdir}/openmpi NO_DEFAULT_PATH
          DOC "Open MPI's components, bundled by the install component device")
file(GLOB pets_pmix_dirs ${pets_ompi_prefix}/lib/${CMAKE_LIBRARY_ARCHITECTURE}/pmix*/lib/pmix
     ${pets_ompi_libdir}/pmix)
find_path(PETS_DEVICE_PMIX_MCA_DIR pmix_mca_pcompress_zlib.so PATHS ${pets_pmix_dirs}
          NO_DEFAULT_PATH DOC "PMIx's components, bundled by the install component device")
find_file(PETS_DEVICE_OMPI_PARAMS openmpi-mca-params.conf
          PATHS /etc/openmpi ${pets_ompi_prefix}/etc ${pets_ompi_prefix}/etc/openmpi NO_DEFAULT_PATH
          DOC "Open MPI's settings file, bundled by the install component device")

set(exes "")
foreach(t IN LISTS bundle_targets)
  list(APPEND exes "$<TARGET_FILE:${t}>")
endforeach()
file(GLOB pets_nvidia_libs LIST_DIRECTORIES true ${PETS_TORCH_PREFIX}/../nvidia/*/lib)
get_filename_component(pets_torch_site "${PETS_TORCH_PREFIX}" DIRECTORY)
file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/device_install.cmake CONTENT "\
set(PETS_SOURCE_DIR [[${PROJECT_SOURCE_DIR}]])
set(PETS_EXECUTABLES [[${exes}]])
set(PETS_STUB_NAMES [[libcurl.so.4;libcrypto.so.3]])
set(PETS_TORCH_SITE [[${pets_torch_site}]])
set(PETS_TORCH_VERSION [[${Torch_VERSION}]])
set(PETS_LIB_DIRS [[${PETS_TORCH_PREFIX}/lib;${pets_nvidia_libs}]])
set(PETS_NVIDIA_LIBS [[${pets_nvidia_libs}]])
set(PETS_ORTE_BINDIR [[${pets_ompi_bindir}]])
set(PETS_OMPI_SHARE [[${pets_ompi_prefix}/share/openmpi]])
set(PETS_OMPI_MCA_DIR [[${PETS_DEVICE_OMPI_MCA_DIR}]])
set(PETS_PMIX_MCA_DIR [[${PETS_DEVICE_PMIX_MCA_DIR}]])
set(PETS_OMPI_PARAMS [[${PETS_DEVICE_OMPI_PARAMS}]])
set(PETS_STRIP [[${CMAKE_STRIP}]])
include([[${PROJECT_SOURCE_DIR}/cmake/PetsDeviceInstall.cmake]])
")
install(SCRIPT ${PROJECT_BINARY_DIR}/device_install.cmake COMPONENT device EXCLUDE_FROM_ALL)
