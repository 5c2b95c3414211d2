# The project's libraries, one per area, defined by src/<area>/CMakeLists.txt with the functions
# below; shared by the main build and the sanitizer build (fuzz/CMakeLists.txt), which includes
# this file and adds src/ without LibTorch:
#   pets::util, pets::data, pets::testdata,          areas free of LibTorch
#   pets::train_options, pets::train_report
#   pets::comm_core, pets::model_core, pets::train_state_core, pets::train_run_core
#                                                    the LibTorch-free part of an area whose other
#                                                    files use LibTorch
#   pets::comm, pets::model, pets::train_state,      the whole area (links its _core)
#   pets::train_run
#   pets::train_device, _input, _step                the other sub-areas of train
#   pets::predict                                    pets_predict's library
#   pets::all                                        every area but testdata (tests, tools)
# Where LibTorch is not found (the pets_torch target is absent) the LibTorch parts are not
# defined. What may use what is cmake/PetsLayers.cmake; pets_check_layers() enforces it.
include_guard(GLOBAL)
include(${CMAKE_CURRENT_LIST_DIR}/PetsLayers.cmake)
get_filename_component(PETS_ROOT "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)

function(pets_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra)
  if(PETS_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()

# pets_add_library(NAME AREA area [TORCH] [ALIAS alias] SOURCES file... [LINK item...])
# A static library pets::<alias> (alias: NAME without its pets_ prefix) of an area. TORCH: it
# uses LibTorch (links pets_torch); skipped where LibTorch is not found. Without TORCH the
# library and everything it links must be LibTorch-free (checked by pets_check_layers).
function(pets_add_library name)
  cmake_parse_arguments(L "TORCH" "AREA;ALIAS" "SOURCES;LINK" ${ARGN})
  if(NOT L_AREA IN_LIST PETS_AREAS)
    message(FATAL_ERROR "pets_add_library(${name}): AREA '${L_AREA}' is none of ${PETS_AREAS}")
  endif()
  if(L_TORCH AND L_AREA IN_LIST PETS_TORCH_FREE_AREAS)
    message(FATAL_ERROR "pets_add_library(${name}): area ${L_AREA} never uses LibTorch (PetsLayers.cmake)")
  endif()
  if(L_TORCH AND NOT TARGET pets_torch)
    return()
  endif()
  if(NOT L_ALIAS)
    string(REGEX REPLACE "^pets_" "" L_ALIAS "${name}")
  endif()
  add_library(${name} STATIC ${L_SOURCES})
  add_library(pets::${L_ALIAS} ALIAS ${name})
  target_include_directories(${name} PUBLIC ${PETS_ROOT}/include)
  target_link_libraries(${name} PUBLIC ${L_LINK})
  if(L_TORCH)
    target_link_libraries(${name} PUBLIC pets_torch)
  endif()
  set_target_properties(${name} PROPERTIES PETS_AREA ${L_AREA} PETS_USES_TORCH "${L_TORCH}")
  pets_warnings(${name})
  set_property(GLOBAL APPEND PROPERTY PETS_LIBRARIES ${name})
endfunction()

# pets_add_program(NAME SOURCES file... LINK item...): a program of src/apps, installed, and
# built into the top of the build folder, where the scripts look for it (build/pets_train).
function(pets_add_program name)
  cmake_parse_arguments(P "" "" "SOURCES;LINK" ${ARGN})
  add_executable(${name} ${P_SOURCES})
  target_link_libraries(${name} PRIVATE ${P_LINK})
  set_target_properties(${name} PROPERTIES PETS_AREA apps
                        RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})
  pets_warnings(${name})
  install(TARGETS ${name} RUNTIME DESTINATION bin)
  set_property(GLOBAL APPEND PROPERTY PETS_PROGRAMS ${name})
endfunction()

# The target an item of a link list names (an alias resolved), or "" for anything else.
function(_pets_link_target item out)
  string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" item "${item}")
  set(target "")
  if(TARGET "${item}")
    get_target_property(aliased "${item}" ALIASED_TARGET)
    if(aliased)
      set(target ${aliased})
    else()
      set(target ${item})
    endif()
  endif()
  set(${out} "${target}" PARENT_SCOPE)
endfunction()

# Everything `target` links, directly or through the targets it links, in ${out}: the targets
# (aliases resolved) and the other items (library files, flags) as they are.
function(_pets_link_closure target out)
  set(seen "")
  set(queue ${target})
  while(queue)
    list(POP_FRONT queue current)
    if(current STREQUAL target)
      get_target_property(items ${current} LINK_LIBRARIES)
    else()
      get_target_property(items ${current} INTERFACE_LINK_LIBRARIES)
    endif()
    if(NOT items)
      set(items "")
    endif()
    foreach(item IN LISTS items)
      _pets_link_target("${item}" dep)
      if(NOT dep)
        set(dep "${item}")
      endif()
      if(NOT dep IN_LIST seen)
        list(APPEND seen "${dep}")
        if(TARGET "${dep}")
          list(APPEND queue "${dep}")
        endif()
      endif()
    endforeach()
  endwhile()
  set(${out} "${seen}" PARENT_SCOPE)
endfunction()

# Configure-time check of the link graph against cmake/PetsLayers.cmake: a library or program
# links only the libraries of its own area and of the areas it may use, and a library without
# TORCH reaches no LibTorch through anything it links. Also writes pets_layers.cmake into the
# build folder (each library's archive, sources, area and the libraries it links) for the ctest
# checks of includes and symbols (PetsCheckLayers.cmake).
function(pets_check_layers)
  get_property(libraries GLOBAL PROPERTY PETS_LIBRARIES)
  get_property(programs GLOBAL PROPERTY PETS_PROGRAMS)
  set(errors "")
  set(layers "set(PETS_CHECK_LIBRARIES ${libraries})\n")
  foreach(target IN LISTS libraries programs)
    get_target_property(area ${target} PETS_AREA)
    set(allowed ${area} ${PETS_USES_${area}})
    if(target IN_LIST PETS_TESTDATA_PROGRAMS)
      list(APPEND allowed testdata)
    endif()
    get_target_property(links ${target} LINK_LIBRARIES)
    if(NOT links)
      set(links "")
    endif()
    foreach(item IN LISTS links)
      _pets_link_target("${item}" dep)
      if(dep)
        get_target_property(dep_area ${dep} PETS_AREA)
        if(dep_area AND NOT dep_area IN_LIST allowed)
          string(APPEND errors "  ${target} (${area}) links ${dep} (${dep_area}); ${area} may use: ${allowed}\n")
        endif()
      endif()
    endforeach()
    if(target IN_LIST programs)
      continue()
    endif()
    _pets_link_closure(${target} closure)
    get_target_property(uses_torch ${target} PETS_USES_TORCH)
    if(NOT uses_torch)
      foreach(item IN LISTS closure)
        # By the file or target name only: LibTorch's folder (a venv-torch-2.11/, site-packages/
        # torch/) may hold non-LibTorch libraries such as a pip torch's NCCL.
        if(item MATCHES "^pets_torch$|(^|/)(lib)?(torch|c10)[^/]*$")
          string(APPEND errors "  ${target} is LibTorch-free (no TORCH) but reaches ${item}\n")
        endif()
      endforeach()
    endif()
    set(deps "")
    foreach(item IN LISTS closure)
      if(item IN_LIST libraries)
        list(APPEND deps ${item})
      endif()
    endforeach()
    string(APPEND layers
           "set(PETS_${target}_ARCHIVE \"$<TARGET_FILE:${target}>\")\n"
           "set(PETS_${target}_AREA ${area})\n"
           "set(PETS_${target}_TORCH \"${uses_torch}\")\n"
           "set(PETS_${target}_DEPS ${deps})\n"
           "set(PETS_${target}_SOURCES \"$<TARGET_PROPERTY:${target},SOURCES>\")\n")
  endforeach()
  if(errors)
    message(FATAL_ERROR "pets: the libraries break the layers of cmake/PetsLayers.cmake:\n${errors}")
  endif()
  file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/pets_layers.cmake CONTENT "${layers}")
endfunction()

# Writes `file`, the list of the tests pets_add_test defined (tests/CMakeLists.txt), for the
# layout check of their includes (PetsCheckLayers.cmake) and for the sanitizer build
# (fuzz/CMakeLists.txt), which builds every test whose libraries are LibTorch-free. Per test:
# its folder under tests/, sources (absolute), the libraries it links, its MPI rank count, whether
# it reaches LibTorch, and the areas its #includes may name (those of the libraries it links and
# what they may use).
function(pets_write_test_list file)
  get_property(tests GLOBAL PROPERTY PETS_TESTS)
  set(text "set(PETS_TESTS ${tests})\n")
  foreach(test IN LISTS tests)
    get_target_property(folder ${test} PETS_TEST_FOLDER)
    get_target_property(sources ${test} PETS_TEST_SOURCES)
    get_target_property(links ${test} PETS_TEST_LINK)
    get_target_property(mpi ${test} PETS_TEST_MPI)
    set(areas "")
    foreach(item IN LISTS links)
      _pets_link_target("${item}" dep)
      if(dep)
        get_target_property(dep_area ${dep} PETS_AREA)
        if(dep_area)
          list(APPEND areas ${dep_area} ${PETS_USES_${dep_area}})
        endif()
      endif()
    endforeach()
    list(REMOVE_DUPLICATES areas)
    _pets_link_closure(${test} closure)
    set(torch "")
    foreach(item IN LISTS closure)
      if(item MATCHES "^pets_torch$|(^|/)(lib)?(torch|c10)[^/]*$")
        set(torch ON)
      endif()
    endforeach()
    string(APPEND text
           "set(PETS_TEST_${test}_FOLDER ${folder})\n"
           "set(PETS_TEST_${test}_SOURCES \"${sources}\")\n"
           "set(PETS_TEST_${test}_LINK ${links})\n"
           "set(PETS_TEST_${test}_MPI \"${mpi}\")\n"
           "set(PETS_TEST_${test}_TORCH \"${torch}\")\n"
           "set(PETS_TEST_${test}_AREAS ${areas})\n")
  endforeach()
  # Rewritten only when it changes: the sanitizer build reconfigures when it does.
  file(CONFIGURE OUTPUT "${file}" CONTENT "${text}")
endfunction()
