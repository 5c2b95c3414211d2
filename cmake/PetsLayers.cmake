# The layers of the code base (docs/design.md, "Layout"), in one place: which areas each area
# may use.
# Read by the build (PetsTargets.cmake checks every library's links at configure time) and by the
# ctest checks layout_includes and layout_symbols (PetsCheckLayers.cmake).
#
#   util  <  comm  <  data  <  train  <  predict  <  apps   testdata: util, data; tests and tools only
#   util  <  model  <  train
#   compat  <  comm, model, train, predict, apps           LibTorch version differences, header-only
#
# train is seven sub-areas, each an area of its own here (train/<sub>: include/pets/train/<sub>,
# src/train/<sub>, tests/train/<sub>), layered as
#
#   train/options  <  train/report  <  train/state  <  train/step  <  train/run
#   train/device  <  train/input  <  train/step            train/options  <  train/input
#
# An area's headers (include/pets/<area>) and sources (src/<area>) include only pets/<area>/ and
# the pets/<used>/ headers below; its library links only those areas' libraries.
set(PETS_TRAIN_AREAS train/options train/report train/state train/device train/input train/step
    train/run)
set(PETS_AREAS util compat comm data model ${PETS_TRAIN_AREAS} predict testdata apps)
set(PETS_USES_util "")
# compat: include/pets/compat/torch.hpp, what differs between LibTorch versions (pets::compat,
# header-only); the LibTorch parts of the areas above it use it.
set(PETS_USES_compat "")
set(PETS_USES_comm util compat)
# data's collective preprocessing uses comm's MPI string collectives; data stays LibTorch-free,
# so it links pets::comm_core only (pets::comm would bring LibTorch: refused by the build).
set(PETS_USES_data util comm)
set(PETS_USES_model util compat)
# train/options: the options, the resume checks, the test switches (LibTorch-free).
set(PETS_USES_train/options util)
# train/report: metrics, the start-up and progress text, TensorBoard (LibTorch-free).
set(PETS_USES_train/report util train/options)
# train/state: the training state, checkpoints, the exported model's metadata.
set(PETS_USES_train/state util compat comm data model train/options train/report)
# train/device: the CUDA seam (cuda_parts.hpp; cuda/ or cuda_absent.cpp) and what it hands over.
set(PETS_USES_train/device util compat comm)
# train/input: the input pipeline, device input, batched resize, resident images, batch tensors.
set(PETS_USES_train/input util compat comm data train/options train/device)
# train/step: the step, the forward passes, Adam, OneCycle, gradient scaling, BatchNorm sync,
# evaluation, rank verification.
set(PETS_USES_train/step util compat comm data model train/options train/report train/state
    train/device train/input)
# train/run: the trainer, the backend, the run's start, data, session and folder, the stop.
set(PETS_USES_train/run util compat comm data model ${PETS_TRAIN_AREAS})
list(REMOVE_ITEM PETS_USES_train/run train/run)
# predict: pets_predict's library, on the training run's backend and forward pass.
set(PETS_USES_predict util compat comm data model ${PETS_TRAIN_AREAS})
set(PETS_USES_testdata util data)
set(PETS_USES_apps util compat comm data model ${PETS_TRAIN_AREAS} predict)
# The areas that never use LibTorch, in any file. comm, model, train/state and train/run have a
# LibTorch-free part too (pets::<area>_core); its files are known by its library's sources.
set(PETS_TORCH_FREE_AREAS util data testdata train/options train/report)
# The programs that may also use testdata (test-data generators; pets_train and pets_preprocess
# never do).
set(PETS_TESTDATA_PROGRAMS pets_synth)
