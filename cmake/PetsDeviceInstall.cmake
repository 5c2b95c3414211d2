# The install component `device`'s libraries and Open MPI part (cmake/PetsDeviceBundle.cmake says
# what the bundle holds), run by `cmake --install BUILD --component device --prefix STAGE`, with
# the variables build/device_install.cmake sets.

set(stage "$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}")
# Libraries every GPU node has (glibc's own): never bundled.
set(glibc_re "^(linux-vdso\\.so\\.1|libc\\.so\\.6|libm\\.so\\.6|libdl\\.so\\.2|libpthread\\.so\\.0|librt\\.so\\.1|ld-linux-x86-64\\.so\\.2|libutil\\.so\\.1|libresolv\\.so\\.2|libanl\\.so\\.1)$")
# Open MPI components left out: other fabrics (UCX, libfabric, PSM, verbs), OpenSHMEM, Flux, and
# those Debian's openmpi-mca-params.conf turns off anyway.
set(mca_skip_re "(ucx|ofi|psm|openib|uct|verbs|flux|spml|sshmem|scoll|memheap|atomic|osc_pt2pt|monitoring|jsm|gridengine|simulator)")

foreach(var PETS_OMPI_MCA_DIR PETS_PMIX_MCA_DIR PETS_OMPI_PARAMS)
  if(NOT EXISTS "${${var}}")
    message(FATAL_ERROR "device bundle: ${var} not found (${${var}}): set PETS_DEVICE_${var} "
                        "when configuring")
  endif()
endforeach()

# Open MPI's launcher, relocated on the node by OPAL_*/PMIX_* variables (bench/device_check.py).
file(INSTALL ${PETS_ORTE_BINDIR}/orterun ${PETS_ORTE_BINDIR}/orted DESTINATION "${stage}/bin"
     USE_SOURCE_PERMISSIONS)
foreach(link mpirun mpiexec)
  file(CREATE_LINK orterun "${stage}/bin/${link}" SYMBOLIC)
endforeach()
file(GLOB mca_all "${PETS_OMPI_MCA_DIR}/*.so")
set(mca "")
foreach(f IN LISTS mca_all)
  get_filename_component(name "${f}" NAME)
  if(NOT name MATCHES "${mca_skip_re}")
    list(APPEND mca "${f}")
  endif()
endforeach()
file(INSTALL ${mca} DESTINATION "${stage}/lib/openmpi")
file(GLOB pmix "${PETS_PMIX_MCA_DIR}/*.so")
file(INSTALL ${pmix} DESTINATION "${stage}/lib/pmix")
file(INSTALL "${PETS_OMPI_SHARE}/" DESTINATION "${stage}/share/openmpi")
file(INSTALL "${PETS_PMIX_MCA_DIR}/../../share/pmix/" DESTINATION "${stage}/share/pmix")
file(INSTALL "${PETS_OMPI_PARAMS}" DESTINATION "${stage}/etc")

# Every shared library these need, except glibc's, torch's own folders and its nvidia/ packages
# (the node's torch brings them), and libcurl/libcrypto, whose stand-ins the bundle carries. The
# build's files are scanned: their RUNPATH is the build machine's, as when they were linked.
list(TRANSFORM PETS_STUB_NAMES REPLACE "\\." "\\\\." OUTPUT_VARIABLE stub_re)
list(TRANSFORM stub_re PREPEND "^")
list(TRANSFORM stub_re APPEND "$")
file(GET_RUNTIME_DEPENDENCIES
     EXECUTABLES ${PETS_EXECUTABLES} ${PETS_ORTE_BINDIR}/orterun ${PETS_ORTE_BINDIR}/orted
     MODULES ${mca} ${pmix}
     DIRECTORIES ${PETS_LIB_DIRS}
     PRE_EXCLUDE_REGEXES "${glibc_re}" ${stub_re}
     POST_EXCLUDE_REGEXES "^${PETS_TORCH_SITE}/"
     RESOLVED_DEPENDENCIES_VAR resolved
     UNRESOLVED_DEPENDENCIES_VAR unresolved
     CONFLICTING_DEPENDENCIES_PREFIX conflict)
if(unresolved)
  message(FATAL_ERROR "device bundle: libraries not found here: ${unresolved}")
endif()
set(bundled "")
foreach(path IN LISTS resolved)
  get_filename_component(name "${path}" NAME)
  if(path MATCHES "^/usr/local/cuda")
    # The CUDA toolkit's runtime: the wheel carries the same libraries in its nvidia/ folders.
    set(found "")
    foreach(dir IN LISTS PETS_NVIDIA_LIBS)
      if(EXISTS "${dir}/${name}")
        set(found "${dir}/${name}")
      endif()
    endforeach()
    if(NOT found)
      message(FATAL_ERROR "device bundle: ${name} comes from the CUDA toolkit here (${path}) and "
                          "is not in the torch wheel's nvidia/ folders")
    endif()
    continue()
  endif()
  message(STATUS "Bundling: ${stage}/lib/${name} (${path})")
  file(COPY_FILE "${path}" "${stage}/lib/${name}")
  list(APPEND bundled "${name}")
endforeach()
foreach(name IN LISTS conflict_FILENAMES)
  message(STATUS "device bundle: ${name} found in several places: ${conflict_${name}}; "
                 "bundled the first")
endforeach()

# Stripped where `--strip` asks for it (the programs are stripped by install(TARGETS) itself).
if(CMAKE_INSTALL_DO_STRIP)
  file(GLOB strip_files "${stage}/lib/*.so*" "${stage}/lib/openmpi/*.so" "${stage}/lib/pmix/*.so"
       "${stage}/bin/orterun" "${stage}/bin/orted")
  foreach(f IN LISTS strip_files)
    if(NOT IS_SYMLINK "${f}")
      file(CHMOD "${f}" PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
           WORLD_READ WORLD_EXECUTE)
      execute_process(COMMAND ${PETS_STRIP} --strip-unneeded "${f}" RESULT_VARIABLE rc)
      if(rc)
        message(FATAL_ERROR "device bundle: ${PETS_STRIP} failed on ${f}")
      endif()
    endif()
  endforeach()
endif()

# What was built from what, for the check's log.
string(TIMESTAMP now "%Y-%m-%dT%H:%M:%SZ" UTC)
cmake_host_system_information(RESULT host QUERY HOSTNAME)
execute_process(COMMAND git -C "${PETS_SOURCE_DIR}" rev-parse --short HEAD
                OUTPUT_VARIABLE rev OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
execute_process(COMMAND git -C "${PETS_SOURCE_DIR}" diff --quiet RESULT_VARIABLE dirty
                ERROR_QUIET)
if(dirty)
  string(APPEND rev "+changes")
endif()
file(GLOB libs RELATIVE "${stage}" "${stage}/lib/*.so*")
list(SORT libs)
list(JOIN libs "\n" libs)
set(programs "")
foreach(exe IN LISTS PETS_EXECUTABLES)
  get_filename_component(name "${exe}" NAME)
  list(APPEND programs "${name}")
endforeach()
list(JOIN programs " " programs)
file(WRITE "${stage}/MANIFEST" "built ${now} on ${host} from ${rev}\n"
     "torch ${PETS_TORCH_VERSION} (${PETS_TORCH_SITE}/torch)\nprograms: ${programs}\n${libs}\n")
