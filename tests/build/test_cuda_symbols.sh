#!/usr/bin/env bash
# The CUDA build (PETS_TORCH_CUDA and NCCL on) really contains its GPU code: the NCCL collectives
# and CUDA stream calls of the comm and train/device archives are referenced, and pets_train links
# them (its dynamic symbol table needs them from libnccl, libcudart and LibTorch's CUDA library).
# Without the CUDA paths these files compile to nothing and every check below fails.
#
#   test_cuda_symbols.sh BUILD_DIR NM   (BUILD_DIR holds pets_train and pets_layers.cmake)
source "$(dirname "${BASH_SOURCE[0]}")/../lib/testlib.sh"
build=$1
nm=${2:-nm}
[ -x "$build/pets_train" ] || fatal "no $build/pets_train"

# The archive of a library, as pets_check_layers wrote it for the layout tests.
archive() {
  sed -n "s/^set(PETS_$1_ARCHIVE \"\(.*\)\")$/\1/p" "$build/pets_layers.cmake"
}

# expect_symbols WHAT NM_ARGS FILE SYMBOL...: every SYMBOL among FILE's symbols (nm -C NM_ARGS).
expect_symbols() {
  local what=$1 args=$2 file=$3 symbols missing=() s
  shift 3
  [ -f "$file" ] || { fail "$what: no file $file"; return; }
  # shellcheck disable=SC2086  # NM_ARGS is a word list
  symbols=$("$nm" -C $args "$file" 2>/dev/null | sed -E 's/^ *[0-9a-fA-F]* *[A-Za-z] //; s/@.*$//')
  for s in "$@"; do
    grep -qxF -- "$s" <<<"$symbols" || grep -qF -- "$s(" <<<"$symbols" || missing+=("$s")
  done
  if [ "${#missing[@]}" -eq 0 ]; then
    pass "$what: $*"
  else
    fail "$what lacks: ${missing[*]}"
  fi
}

comm_core=$(archive pets_comm_core)
comm=$(archive pets_comm)
train=$(archive pets_train_device)
[ -n "$comm_core" ] && [ -n "$comm" ] && [ -n "$train" ] ||
  fatal "no archives named in $build/pets_layers.cmake"

# NcclComm (comm_core): the collectives and the communicator's life cycle, on CUDA streams.
expect_symbols "NCCL calls of $(basename "$comm_core")" --undefined-only "$comm_core" \
  ncclAllReduce ncclBroadcast ncclCommInitRank ncclGetUniqueId ncclCommDestroy ncclCommAbort \
  cudaSetDevice
# NcclCommunicator (comm): device tensors handed to NCCL on the current CUDA stream.
expect_symbols "NCCL and CUDA stream calls of $(basename "$comm")" --undefined-only "$comm" \
  pets::comm::NcclComm::all_reduce pets::comm::NcclComm::broadcast cudaStreamSynchronize \
  c10::cuda::getCurrentCUDAStream
expect_symbols "NCCL communicator in $(basename "$comm")" --defined-only "$comm" \
  pets::comm::make_nccl_communicator
# The device input (train/device): uploads on a stream of its own, ordered by CUDA events.
expect_symbols "CUDA stream calls of $(basename "$train")" --undefined-only "$train" \
  c10::cuda::getStreamFromPool c10::cuda::getCurrentCUDAStream cudaEventRecord cudaStreamWaitEvent

# The program: the linker kept the NCCL communicator (the trainer makes it for a CUDA device),
# so its calls are needed from the shared libraries at run time.
expect_symbols "pets_train's dynamic symbols" "-D --undefined-only" "$build/pets_train" \
  ncclAllReduce ncclBroadcast ncclCommInitRank cudaStreamSynchronize \
  c10::cuda::getCurrentCUDAStream
finish
