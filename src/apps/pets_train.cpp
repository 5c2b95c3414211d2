// pets_train: frozen-backbone ResNet-50d fine-tuning on the preprocessed pets store, one process
// per rank (`mpirun -np N pets_train --data pets.h5`). Options: pets/train/options/options.hpp.
#include <mpi.h>

#include <cstdio>

#include "pets/comm/mpi_comm.hpp"
#include "pets/comm/program.hpp"
#include "pets/train/options/options.hpp"
#include "pets/train/run/run_start.hpp"
#include "pets/train/run/trainer.hpp"

int main(int argc, char** argv) {
  return pets::run_mpi_program(argc, argv, [](int argc, char** argv) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const pets::train::ParseResult parsed = pets::train::parse_train_options(argc, argv);
    switch (parsed.action) {
      case pets::train::Action::kHelp:
        if (rank == 0) std::fputs(parsed.help.c_str(), stdout);
        return 0;
      case pets::train::Action::kWriteConfig:
        pets::agree_on_usage([&] {
          if (rank == 0)
            pets::train::write_config_file(parsed.options, parsed.options.write_config);
        });
        if (rank == 0) std::printf("wrote %s\n", parsed.options.write_config.c_str());
        return 0;
      case pets::train::Action::kTrain:
        break;
    }
    // --resume: the run's own options, from its checkpoint. Wrong paths now, not after the model
    // is built.
    const pets::train::TrainOptions options = pets::agree_on_usage([&] {
      pets::train::TrainOptions o = pets::train::options_to_run(parsed);
      pets::train::check_paths(o);
      return o;
    });
    const pets::comm::MpiComm mpi;
    const pets::train::TrainResult result = pets::train::run_training(options, mpi);
    return result.preempted ? pets::train::kExitPreempted : 0;
  });
}
