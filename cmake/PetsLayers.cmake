# The layers of the code base (docs/design.md, "Layout"), in one place: which areas each area
# may use.
# Read by the build (PetsTargets.cmake checks every library's links at configure time) and by the
# ctest checks layout_includes and layout_symbols (PetsCheckLayers.cmake).
#
#   util  <  comm  <  data  <  train  <  apps            testdata: util, data; tests and tools only
#   util  <  model  <  train
#   compat  <  comm, model, train, apps                  LibTorch version differences, header-only
#
# An area's headers (include/pets/<area>) and sources (src/<area>) include only pets/<area>/ and
# the pets/<used>/ headers below; its library links only those areas' libraries.
set(PETS_AREAS util compat comm data model train testdata apps)
set(PETS_USES_util "")
# compat: include/pets/compat/torch.hpp, what differs between LibTorch versions (pets::compat,
# header-only); the LibTorch parts of the areas above it use it.
set(PETS_USES_compat "")
set(PETS_USES_comm util compat)
# data's collective preprocessing uses comm's MPI string collectives; data stays LibTorch-free,
# so it links pets::comm_core only (pets::comm would bring LibTorch: refused by the build).
set(PETS_USES_data util comm)
set(PETS_USES_model util compat)
set(PETS_USES_train util compat comm data model)
set(PETS_USES_testdata util data)
set(PETS_USES_apps util compat comm data model train)
# The areas that never use LibTorch, in any file. comm, model and train have a LibTorch-free
# part too (pets::<area>_core); its files are known by its library's sources.
set(PETS_TORCH_FREE_AREAS util data testdata)
# The programs that may also use testdata (test-data generators; pets_train and pets_preprocess
# never do).
set(PETS_TESTDATA_PROGRAMS pets_synth)
