// pets_synth: writes the embedded synthetic Oxford-IIIT-Pet-like image folder.
// A serial tool (no MPI): bad options exit 2, other failures exit 1.
#include <boost/program_options.hpp>
#include <iostream>

#include "pets/testdata/synth.hpp"
#include "pets/util/app.hpp"
#include "pets/util/error.hpp"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  try {
    pets::testdata::SynthOptions o;
    po::options_description desc("pets_synth --out DIR --per-class N [options]");
    desc.add_options()("help,h", "show this help")(
        "out", po::value<std::string>(&o.out_dir)->required(), "output folder (created)")(
        "per-class", po::value<int>(&o.per_class)->required(), "images per breed")(
        "classes", po::value<int>(&o.classes)->default_value(37), "number of breeds (1..37)")(
        "seed", po::value<std::uint64_t>(&o.seed)->default_value(0), "random seed")(
        "quirks", po::bool_switch(&o.quirks), "add the awkward files a real folder holds");
    po::variables_map vm;
    try {
      po::store(
          po::command_line_parser(argc, argv).options(desc).style(pets::command_line_style()).run(),
          vm);
      if (vm.count("help")) {
        std::cout << desc << "\n";
        return 0;
      }
      po::notify(vm);
    } catch (const po::error& e) {
      throw pets::UsageError(std::string("pets_synth: ") + pets::program_options_message(e));
    }
    const std::int64_t n = pets::testdata::write_synthetic_dataset(o);
    std::cout << "pets_synth: wrote " << n << " files to " << o.out_dir << "\n";
    return 0;
  } catch (const pets::UsageError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "pets_synth: error: " << e.what() << "\n";
    return 1;
  }
}
