/// \file
/// pets_bench's report: the benchmarks run in order into one JSON document (--report and
/// stdout) with a short table on stderr, and `pets_bench --check FILE`, which holds a report to
/// the sections written here.

#include <sys/utsname.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "harness.hpp"
#include "pets/comm/mpi_comm.hpp"
#include "pets/util/error.hpp"
#include "pets/util/memory.hpp"
#include "pets/util/threads.hpp"

namespace fs = std::filesystem;

namespace pets::bench {
namespace {

std::string now_iso() {
  std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S%z", std::localtime(&t));
  return buf;
}

std::string first_line_of(const std::string& command) {
  std::string out;
  if (FILE* p = popen(command.c_str(), "r")) {
    char buf[512];
    if (std::fgets(buf, sizeof buf, p)) out = buf;
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

template <typename... Args>
void row(const char* fmt, Args... args) {
  char line[256];
  std::snprintf(line, sizeof line, fmt, args...);
  std::cerr << line << "\n";
}

/// Sections 1-4 (absent with --e2e-only).
void print_measurements(const json& r) {
  const auto& roof = r.at("roofline");
  const auto& fl = r.at("flops");
  const auto& ms = r.at("model_step");
  row("%-34s %12s %12s", "", "fp32", "bf16");
  row("%-34s %12.1f %12.1f", "roofline conv GFLOP/s", roof["fp32"]["gflops"].get<double>(),
      roof["bf16"]["gflops"].get<double>());
  if (roof.contains("fp16"))
    row("%-34s %12.1f (fp16), step %.1f images/s, %.1f%% of it", "roofline conv GFLOP/s",
        roof["fp16"]["gflops"].get<double>(), ms["fp16"]["images_per_s"].get<double>(),
        100 * ms["fp16"]["roofline_fraction"].get<double>());
  row("%-34s %12.3f", "GFLOP/image (forward, counted)",
      fl["forward_gflop_per_image"].get<double>());
  row("%-34s %12.2f %12.2f", "model step images/s", ms["fp32"]["images_per_s"].get<double>(),
      ms["bf16"]["images_per_s"].get<double>());
  row("%-34s %11.1f%% %11.1f%%", "model step / roofline",
      100 * ms["fp32"]["roofline_fraction"].get<double>(),
      100 * ms["bf16"]["roofline_fraction"].get<double>());
  row("%-34s %12.3f %12.3f", "  8 heads (a sweep) / 1 head",
      ms["fp32"]["sweep"]["over_one_head"].get<double>(),
      ms["bf16"]["sweep"]["over_one_head"].get<double>());
  row("%-34s %12lld %12lld", "  bytes per step, 1 / 8 heads",
      ms["fp32"]["sweep"]["bytes_per_step_one_head"].get<long long>(),
      ms["fp32"]["sweep"]["bytes_per_step"].get<long long>());
  if (r.contains("model_step_default_malloc")) {
    const auto& dm = r.at("model_step_default_malloc");
    row("%-34s %12.2f %12.2f", "  same, glibc's default malloc",
        dm["fp32"]["images_per_s"].get<double>(), dm["bf16"]["images_per_s"].get<double>());
  }
  const auto& ld = r["loader"];
  row("%-34s %12.1f", "loader images/s (one rank)", ld["images_per_s"].get<double>());
  row("%-34s %12.1f", "  per CPU-second (one core)", ld["images_per_cpu_s"].get<double>());
  for (const auto& w : ld["workers_sweep"])
    row("%-34s %12.1f   per CPU-s %8.1f, lock %4.1f %%",
        ("  " + std::to_string(w["workers"].get<int>()) + " workers, images/s").c_str(),
        w["images_per_s"].get<double>(), w["images_per_cpu_s"].get<double>(),
        100 * w["lock_held_share"].get<double>());
  const auto& st = ld["staging"];
  row("%-34s %12.1f   per CPU-s %8.1f", "GPU path staging images/s",
      st["images_per_s"].get<double>(), st["images_per_cpu_s"].get<double>());
  const auto& st_later = st["steady"].is_null() ? st["first_epoch"] : st["steady"];
  row("%-34s %12.1f   after it %8.1f", "  loader CPU us/image, first epoch",
      st["first_epoch"]["loader_cpu_us_per_image"].get<double>(),
      st_later["loader_cpu_us_per_image"].get<double>());
  row("%-34s %12.1f   CPU ms %10.1f", "  chunk check before it, ms",
      1e3 * st["check_seconds"].get<double>(), 1e3 * st["check_cpu_seconds"].get<double>());
  for (const auto& w : st["workers_sweep"])
    row("%-34s %12.1f   per CPU-s %8.1f",
        ("  " + std::to_string(w["workers"].get<int>()) + " workers, images/s").c_str(),
        w["images_per_s"].get<double>(), w["images_per_cpu_s"].get<double>());
  if (st.contains("two_workers_speedup"))
    row("%-34s %12.2f", "  2 workers / 1, images/s", st["two_workers_speedup"].get<double>());
  if (ld.contains("resident")) {
    const auto& rs = ld["resident"];
    row("%-34s %12.1f   per CPU-s %8.1f", "GPU path resident images/s",
        rs["images_per_s"].get<double>(), rs["images_per_cpu_s"].get<double>());
    row("%-34s %12.1f   staging %9.1f", "  loader CPU us/image",
        rs["loader_cpu_us_per_image_vs_staging"]["resident"].get<double>(),
        rs["loader_cpu_us_per_image_vs_staging"]["staging"].get<double>());
    row("%-34s %12.2f   GB/s %12.2f", "  load of the store, s", rs["load"]["seconds"].get<double>(),
        rs["load"]["gb_per_s"].get<double>());
  }
  row("%-34s %12.2f %12.2f", "cores for 2500 img/s (cpu, device)",
      ld["cores_for_2500_img_s"]["cpu_path"].get<double>(),
      ld["cores_for_2500_img_s"]["device_path_staging"].get<double>());
}

void print_table(const json& r) {
  if (r.contains("roofline")) print_measurements(r);
  if (r.contains("end_to_end")) {
    row("%-22s %9s %9s %9s %8s %7s", "end to end", "train/s", "eval/s", "wall s", "wait %",
        "acc %");
    for (const auto& [name, run] : r["end_to_end"]["runs"].items())
      row("%-22s %9.2f %9.2f %9.1f %8.2f %7.2f", name.c_str(),
          run["train_images_per_s"].get<double>(), run["eval_images_per_s"].get<double>(),
          run["wall_seconds"].get<double>(), 100 * run["loader_wait_share"].get<double>(),
          run["final_accuracy"].get<double>());
  }
}

/// The report to `path` and stdout.
void write_report(const json& r, const std::string& path) {
  const std::string text = r.dump(2);
  {
    std::ofstream out(path);
    out << text << "\n";
    PETS_CHECK(out.good(), "cannot write " + path);
  }
  std::cout << text << std::endl;
}

}  // namespace

void run_report(const Config& c, int argc, char** argv) {
  if (c.step_only.empty()) fs::create_directories(c.work);  // --step-only writes only --report
  torch::set_num_threads(c.threads > 0 ? c.threads : pets::affinity_cpu_count());
  torch::manual_seed(0);
  const auto start = Clock::now();

  utsname u{};
  uname(&u);
  double load[3] = {0, 0, 0};
  (void)getloadavg(load, 3);
  json r = {{"schema", "pets_bench/1"},
            {"date", now_iso()},
            {"host", u.nodename},
            {"cpu", first_line_of("lscpu 2>/dev/null | sed -n 's/^Model name: *//p'")},
            {"cores_in_affinity_mask", pets::affinity_cpu_count()},
            {"threads", torch::get_num_threads()},
            {"torch_version", TORCH_VERSION},
            {"device", c.device},
            {"smoke", c.smoke},
            {"load_average_start", {load[0], load[1], load[2]}}};

  if (!c.step_only.empty()) {
    {
      int mpi_argc = argc;
      char** mpi_argv = argv;
      const pets::comm::MpiEnvironment environment(mpi_argc, mpi_argv);
      const pets::comm::MpiComm mpi;
      PETS_CHECK(pets::retain_freed_memory(), "the allocator refused to keep freed memory");
      pets::model::ResNet50d model(c.classes);
      r["step_only"] = model_step_only(model, c, mpi);
    }
    (void)getloadavg(load, 3);
    r["load_average_end"] = {load[0], load[1], load[2]};
    r["bench_seconds"] = seconds_since(start);
    write_report(r, c.report);
    const json& s = r["step_only"];
    row("%-20s %10.2f images/s  %8.3f s/step  peak RSS %8.1f MiB", c.step_only.c_str(),
        s["images_per_s"].get<double>(), s["seconds_per_step"].get<double>(),
        s["maxrss_kib"].get<double>() / 1024);
    if (s.contains("cuda_peak_allocated_bytes"))
      row("%-20s peak GPU memory %8.1f MiB allocated, %8.1f MiB reserved", "",
          s["cuda_peak_allocated_bytes"].get<double>() / (1 << 20),
          s["cuda_peak_reserved_bytes"].get<double>() / (1 << 20));
    return;
  }

  std::string store;
  std::cerr << "pets_bench: data\n";
  const json data = prepare_data(c, store);

  if (c.device == "cuda")
    r["gpu"] = first_line_of(
        "nvidia-smi --query-gpu=name,driver_version,memory.total "
        "--format=csv,noheader 2>/dev/null");
  if (c.loader_only) {
    std::cerr << "pets_bench: 4. loader\n";
    r["loader"] = loader(c, store);
    write_report(r, c.report);
    return;
  }
  if (!c.e2e_only) {
    std::cerr << "pets_bench: 1. roofline\n";
    r["roofline"] = roofline(c);
    pets::model::ResNet50d model(c.classes);
    std::cerr << "pets_bench: 2. FLOPs\n";
    r["flops"] = count_flops(model, c);
    std::cerr << "pets_bench: 3. model step\n";
    const double step_gflop = r["flops"]["train_step_gflop_per_image"].get<double>();
    {
      // The step's backend needs MPI: a world of this process alone, ended before the pets_train
      // runs (mpirun does not start from inside an MPI process).
      int mpi_argc = argc;
      char** mpi_argv = argv;
      const pets::comm::MpiEnvironment environment(mpi_argc, mpi_argv);
      const pets::comm::MpiComm mpi;
      // The allocator lever, measured in this run: glibc's defaults of a fresh process first (no
      // mallopt call before this point), then what pets_train sets (pets/util/memory.hpp). A CPU
      // lever: on CUDA only the second is measured.
      if (!on_cuda(c))
        r["model_step_default_malloc"] = model_step(model, c, step_gflop, r["roofline"], mpi);
      PETS_CHECK(pets::retain_freed_memory(), "the allocator refused to keep freed memory");
      r["model_step"] = model_step(model, c, step_gflop, r["roofline"], mpi);
    }
    std::cerr << "pets_bench: 4. loader\n";
    r["loader"] = loader(c, store);
  }

  if (c.e2e) r["end_to_end"] = end_to_end(c, store, data);
  (void)getloadavg(load, 3);
  r["load_average_end"] = {load[0], load[1], load[2]};
  r["bench_seconds"] = seconds_since(start);

  write_report(r, c.report);
  print_table(r);
}

int check_report(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::cerr << "check: cannot read " << path << "\n";
    return 1;
  }
  json r;
  try {
    r = json::parse(in);
  } catch (const std::exception& e) {
    std::cerr << "check: " << path << " is not JSON: " << e.what() << "\n";
    return 1;
  }
  std::vector<std::string> failures;
  auto positive = [&](const json& j, const std::string& where) {
    const json::json_pointer p(where);
    if (!j.contains(p) || !j.at(p).is_number()) {
      failures.push_back(where + ": missing");
      return;
    }
    const double v = j.at(p).get<double>();
    if (!std::isfinite(v) || v <= 0)
      failures.push_back(where + ": not positive (" + std::to_string(v) + ")");
  };
  for (const char* p : {"/threads",
                        "/roofline/fp32/gflops",
                        "/roofline/bf16/gflops",
                        "/flops/conv_gflop_per_image",
                        "/flops/linear_gflop_per_image",
                        "/flops/forward_gflop_per_image",
                        "/flops/train_step_gflop_per_image",
                        "/flops/conv_modules",
                        "/model_step/fp32/images_per_s",
                        "/model_step/bf16/images_per_s",
                        "/model_step/fp32/roofline_fraction",
                        "/model_step/bf16/roofline_fraction",
                        "/model_step/fp32/sweep/over_one_head",
                        "/model_step/fp32/sweep/bytes_per_step_one_head",
                        "/loader/images_per_s",
                        "/loader/images",
                        "/loader/images_per_cpu_s",
                        "/loader/workers_sweep/0/images_per_cpu_s",
                        "/loader/workers_sweep/0/images_per_s",
                        "/loader/staging/images_per_cpu_s",
                        "/loader/resident/images_per_cpu_s",
                        "/loader/resident/load/gb_per_s",
                        "/loader/cores_for_2500_img_s/cpu_path",
                        "/loader/cores_for_2500_img_s/device_path_staging"})
    positive(r, p);
  // The allocator lever is the CPU's; fp16 is measured on CUDA only.
  const bool cuda = r.value("device", "cpu") == "cuda";
  for (const char* p : {"/model_step_default_malloc/fp32/images_per_s",
                        "/model_step_default_malloc/bf16/images_per_s"})
    if (!cuda) positive(r, p);
  for (const char* p : {"/roofline/fp16/gflops", "/model_step/fp16/images_per_s",
                        "/model_step/fp16/roofline_fraction"})
    if (cuda) positive(r, p);
  // A sweep's step hands over each head's buffer: heads times one head's bytes.
  if (r.contains("/model_step/fp32/sweep"_json_pointer)) {
    const json& sw = r["model_step"]["fp32"]["sweep"];
    if (sw["bytes_per_step"].get<int64_t>() !=
        sw["heads"].get<int64_t>() * sw["bytes_per_step_one_head"].get<int64_t>())
      failures.push_back("/model_step/fp32/sweep: bytes_per_step is not heads x one head's");
  }
  if (r.contains("/flops/conv_calls"_json_pointer) &&
      r["flops"]["conv_calls"] != r["flops"]["conv_modules"])
    failures.push_back("/flops: conv_calls != conv_modules");
  std::vector<std::string> runs = kDefaultE2eRuns;
  if (r.contains("/end_to_end/run_names"_json_pointer))
    runs = r["end_to_end"]["run_names"].get<std::vector<std::string>>();
  for (const auto& name : runs) {
    const std::string base = "/end_to_end/runs/" + name;
    for (const char* f : {"/wall_seconds", "/train_images_per_s", "/eval_images_per_s",
                          "/train_seconds", "/eval_seconds", "/epochs"})
      positive(r, base + f);
    const json::json_pointer w(base + "/loader_wait_share");
    if (!r.contains(w) || !r.at(w).is_number() || r.at(w).get<double>() < 0 ||
        r.at(w).get<double>() > 1)
      failures.push_back(base + "/loader_wait_share: missing or outside [0, 1]");
  }
  for (const auto& f : failures) std::cerr << "check: " << f << "\n";
  if (!failures.empty()) return 1;
  std::cerr << "check: " << path << " complete\n";
  return 0;
}

}  // namespace pets::bench
