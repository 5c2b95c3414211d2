#include "pets/train/device/pending_images.hpp"

namespace pets::train {

at::Tensor PendingImages::get() {
  if (ready_) {
    ready_->hand_over(images_);
    ready_.reset();
  }
  return images_;
}

}  // namespace pets::train
