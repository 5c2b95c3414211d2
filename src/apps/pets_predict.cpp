// pets_predict: classifies images with a model pets_train exported, one line per image
// (`mpirun -np N pets_predict --model runs/pets/model.safetensors images/`).
// Options: pets/predict/predict.hpp.
#include <mpi.h>

#include <cstdio>

#include "pets/comm/mpi_comm.hpp"
#include "pets/comm/program.hpp"
#include "pets/predict/predict.hpp"

int main(int argc, char** argv) {
  return pets::run_mpi_program(argc, argv, [](int argc, char** argv) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const pets::train::PredictParse parsed = pets::train::parse_predict_options(argc, argv);
    if (parsed.help) {
      if (rank == 0) std::fputs(parsed.help_text.c_str(), stdout);
      return 0;
    }
    const pets::comm::MpiComm mpi;
    return pets::train::run_prediction(parsed.options, mpi);
  });
}
