// earlier_checkpoint CHECKPOINT DIR: writes into DIR the checkpoint CHECKPOINT as a pets_train
// from before Accelerate's batching wrote it (no version, no batching, no image-size setting),
// with its digest made anew, and points DIR/latest at it. For test_resume.sh.
#include <cstdio>
#include <exception>

#include "pets/train/state/checkpoint.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: earlier_checkpoint CHECKPOINT DIR\n");
    return 2;
  }
  try {
    pets::train::Checkpoint ckpt = pets::train::read_checkpoint(argv[1]);
    ckpt.state.erase("version");
    ckpt.state.erase("batching");
    ckpt.state.at("config").at("options").erase("image-size");
    pets::train::write_checkpoint_file(argv[2], ckpt.index, ckpt.state, ckpt.tensors, ckpt.shards);
    pets::train::point_latest_at(argv[2], ckpt.index);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "earlier_checkpoint: %s\n", e.what());
    return 1;
  }
  return 0;
}
