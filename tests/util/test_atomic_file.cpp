// pets::write_file_atomically's temporary names (`<target>.tmp.<host>.<pid>`) and the clean-up at
// the next start: a temporary file of this host whose process is gone is removed; one whose
// process runs, one of another host and one of the older form without a host are kept, unless
// older than the caller's cut-off; other files are never touched.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "pets/util/atomic_file.hpp"

namespace {

namespace fs = std::filesystem;

fs::path fresh_folder(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("pets_atomic_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void touch(const fs::path& path) { std::ofstream(path) << "partial"; }

/// The pid of a process that ran and is gone (reaped).
long dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

std::string this_host_tag() {
  const std::string tmp = pets::atomic_temp_path("x");
  const auto parsed = pets::parse_temp_name(tmp);
  return parsed ? parsed->host : "";
}

bool contains(const std::vector<std::string>& list, const fs::path& path) {
  return std::any_of(list.begin(), list.end(),
                     [&](const std::string& s) { return s.rfind(path.string(), 0) == 0; });
}

TEST(AtomicFile, TempNameRecordsHostAndPid) {
  const std::string tmp = pets::atomic_temp_path("/out/model.safetensors");
  const auto parsed = pets::parse_temp_name(fs::path(tmp).filename().string());
  ASSERT_TRUE(parsed) << tmp;
  EXPECT_EQ(parsed->target, "model.safetensors");
  EXPECT_FALSE(parsed->host.empty());
  EXPECT_EQ(parsed->host.find('/'), std::string::npos);
  EXPECT_EQ(parsed->pid, ::getpid());

  const auto dotted = pets::parse_temp_name("ckpt-12.safetensors.tmp.node1.cluster.org.4242");
  ASSERT_TRUE(dotted);
  EXPECT_EQ(dotted->target, "ckpt-12.safetensors");
  EXPECT_EQ(dotted->host, "node1.cluster.org");
  EXPECT_EQ(dotted->pid, 4242);
  const auto older = pets::parse_temp_name("model.safetensors.tmp.777");
  ASSERT_TRUE(older);
  EXPECT_EQ(older->host, "");
  EXPECT_EQ(older->pid, 777);
  for (const char* other : {"model.safetensors", "latest", ".tmp.12", "a.tmp.host.x12", "a.tmp.",
                            "a.tmp..12", "notes.tmp.txt"})
    EXPECT_FALSE(pets::parse_temp_name(other)) << other;
}

TEST(AtomicFile, WritesWholeFileAndLeavesNoTemp) {
  const fs::path dir = fresh_folder("write");
  pets::write_file_atomically((dir / "latest").string(), "ckpt-3.safetensors\n");
  std::ifstream in(dir / "latest");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "ckpt-3.safetensors\n");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  fs::remove_all(dir);
}

TEST(AtomicFile, RemovesOnlyTempsWhoseWriterIsGone) {
  const fs::path dir = fresh_folder("stale");
  const std::string host = this_host_tag();
  ASSERT_FALSE(host.empty());
  const fs::path dead = dir / ("model.safetensors.tmp." + host + "." + std::to_string(dead_pid()));
  const fs::path alive =
      dir / ("ckpt-4.safetensors.tmp." + host + "." + std::to_string(::getppid()));
  const fs::path remote = dir / "ckpt-5.safetensors.tmp.some-other-node.1";
  const fs::path older = dir / ("latest.tmp." + std::to_string(dead_pid()));
  const fs::path model = dir / "model.safetensors";
  const fs::path notes = dir / "notes.tmp.txt";
  for (const fs::path& p : {dead, alive, remote, older, model, notes}) touch(p);

  const pets::StaleTempReport report = pets::remove_stale_temp_files(dir.string());
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(contains(report.removed, dead));
  EXPECT_EQ(report.removed.size(), 1u);
  for (const fs::path& p : {alive, remote, older}) {
    EXPECT_TRUE(fs::exists(p)) << p;
    EXPECT_TRUE(contains(report.kept, p)) << p;
  }
  EXPECT_TRUE(fs::exists(model));
  EXPECT_TRUE(fs::exists(notes));

  // With a cut-off after they were written (a lock taken later): another host's and the older
  // form's go too; a running process's file of this host stays whatever its age.
  const auto later = fs::file_time_type::clock::now() + std::chrono::seconds(5);
  const pets::StaleTempReport second = pets::remove_stale_temp_files(dir.string(), later);
  EXPECT_FALSE(fs::exists(remote));
  EXPECT_FALSE(fs::exists(older));
  EXPECT_TRUE(fs::exists(alive));
  EXPECT_EQ(second.removed.size(), 2u);
  EXPECT_TRUE(fs::exists(model));
  EXPECT_TRUE(fs::exists(notes));
  fs::remove_all(dir);
}

TEST(AtomicFile, MissingFolderIsNotAnError) {
  const auto report = pets::remove_stale_temp_files("/nonexistent/pets/folder");
  EXPECT_TRUE(report.removed.empty());
  EXPECT_TRUE(report.kept.empty());
}

}  // namespace
