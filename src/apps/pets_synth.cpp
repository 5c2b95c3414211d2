// pets_synth: writes the embedded synthetic Oxford-IIIT-Pet-like image folder.
// A serial tool (no MPI): bad options exit 2, other failures exit 1 (pets::run_program).
#include <boost/program_options.hpp>
#include <iostream>
#include <optional>
#include <string>

#include "pets/testdata/synth.hpp"
#include "pets/util/app.hpp"
#include "pets/util/error.hpp"

namespace po = boost::program_options;

namespace {

int synth_main(int argc, char** argv) {
  pets::testdata::SynthOptions o;
  // The seed is read as text: Boost would turn "-1" into 2^64-1.
  std::string seed;
  po::options_description desc("pets_synth --out DIR --per-class N [options]");
  desc.add_options()("help,h", "show this help")(
      "out", po::value<std::string>(&o.out_dir)->required(), "output folder (created)")(
      "per-class", po::value<int>(&o.per_class)->required(), "images per breed")(
      "classes", po::value<int>(&o.classes)->default_value(o.classes), "number of breeds (1..37)")(
      "seed", po::value<std::string>(&seed)->default_value(std::to_string(o.seed)),
      "random seed (0 .. 2^64-1)")("quirks", po::bool_switch(&o.quirks),
                                   "add the awkward files a real folder holds");
  po::variables_map vm;
  if (!pets::parse_command_line(argc, argv, desc, vm, "pets_synth")) return 0;  // --help
  o.seed = pets::unsigned_option(seed, "pets_synth: --seed");
  const std::int64_t n = pets::testdata::write_synthetic_dataset(o);
  std::cout << "pets_synth: wrote " << n << " files to " << o.out_dir << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return pets::run_program(argc, argv, synth_main); }
