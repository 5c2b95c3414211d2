#include "pets/train/device/crop_slot.hpp"

#include "pets/util/error.hpp"

namespace pets::train {

void check_slots(const std::vector<CropSlot>& slots, std::int64_t total, const std::string& who,
                 const std::string& where) {
  for (const CropSlot& s : slots)
    PETS_CHECK(slot_inside(s, total),
               who + ": a crop slot is empty, narrower than its rows or runs past " + where);
}

}  // namespace pets::train
