// Two hosts made of network namespaces on this machine (issue 19, "Multi-node for real"): a veth
// pair with addresses of our own between the namespaces only, a hostname per namespace (unshare
// --uts; /etc/netns/NS/hosts, which `ip netns exec` mounts over /etc/hosts, resolves them), and
// `ip netns exec` as Open MPI's launch agent. `unillm launch --hostfile` runs dp2 training with MPI
// over TCP between them (btl self,tcp: shared memory cannot stand in) and must give one host's
// losses; a rank killed mid-step on the second host ends the job at once. Skips, saying why, where
// namespaces cannot be made (no root or CAP_NET_ADMIN, no `ip` or `unshare`).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/run_compare_util.h"
#include "support/expect.h"
#include "support/run_cli.h"

namespace unillm {
namespace {

using testing::run_shell;
using testing::shell_quote;

const std::string kSft = "examples/train_lora/stories260K_lora_sft.yaml";
const std::string kShort =
    " max_steps=4 logging_steps=1 save_steps=100 eval_steps=100 max_samples=32"
    " per_device_train_batch_size=4 --quiet";
const std::string kBin = std::string(UNILLM_BINARY_DIR) + "/unillm";
const char* const kHost[2] = {"unillm-h1", "unillm-h2"};
const char* const kAddr[2] = {"10.231.0.1", "10.231.0.2"};

// The two namespaces, their veth pair, hosts files, the agent script and the hostfile; all removed
// by the destructor (processes left inside are killed first), whatever the test's outcome.
class TwoHosts {
 public:
  explicit TwoHosts(const std::string& dir) : dir_(dir) {
    const std::string tag = std::to_string(getpid());
    ns_[0] = "unillm-h1-" + tag;
    ns_[1] = "unillm-h2-" + tag;
    const std::string veth[2] = {"ulv" + tag + "a", "ulv" + tag + "b"};  // <= 15 characters
    for (const auto& ns : ns_) {
      auto r = run_shell("ip netns add " + ns);
      if (r.exit_code != 0) {
        why_not_ =
            "cannot make a network namespace (needs root or CAP_NET_ADMIN, and iproute2): " + r.err;
        return;
      }
      made_.push_back(ns);
    }
    std::string setup = "set -e; ip link add " + veth[0] + " type veth peer name " + veth[1];
    for (int h = 0; h < 2; ++h) {
      setup += "; ip link set " + veth[h] + " netns " + ns_[h] + "; ip -n " + ns_[h] +
               " addr add " + kAddr[h] + "/24 dev " + veth[h] + "; ip -n " + ns_[h] + " link set " +
               veth[h] + " up; ip -n " + ns_[h] + " link set lo up";
      // `ip netns exec` mounts /etc/netns/NS/hosts over /etc/hosts: the two names resolve there.
      std::error_code ec;
      std::filesystem::create_directories("/etc/netns/" + ns_[h], ec);
      std::ofstream hosts("/etc/netns/" + ns_[h] + "/hosts");
      hosts << "127.0.0.1 localhost\n"
            << kAddr[0] << " " << kHost[0] << "\n"
            << kAddr[1] << " " << kHost[1] << "\n";
      if (ec || !hosts) {
        why_not_ = "cannot write /etc/netns/" + ns_[h] + "/hosts (read-only /etc?)";
        return;
      }
    }
    auto r = run_shell(setup + "; ip netns exec " + ns_[0] + " unshare --uts true");
    if (r.exit_code != 0) {
      why_not_ = "cannot wire the namespaces (veth, addresses, unshare --uts): " + r.err;
      return;
    }
    // Open MPI's rsh agent is called as `AGENT HOST COMMAND…` (COMMAND a shell line that sets
    // PATH and starts orted): run it in that host's namespace under its own hostname.
    std::ofstream(dir_ + "/agent.sh")
        << "#!/bin/sh\nhost=$1; shift\ncase $host in\n  " << kHost[0] << ") ns=" << ns_[0]
        << ";;\n  " << kHost[1] << ") ns=" << ns_[1]
        << ";;\n  *) echo \"agent: unknown host $host\" >&2; exit 1;;\nesac\n"
        << "exec ip netns exec \"$ns\" unshare --uts sh -c \"hostname $host && $*\"\n";
    std::filesystem::permissions(dir_ + "/agent.sh", std::filesystem::perms::owner_all);
  }
  ~TwoHosts() {
    for (const auto& ns : made_) {
      // The test's own leftovers only (a rank that outlived a failure): by pid, then the namespace
      // (deleting it removes its end of the veth pair, and so the pair).
      run_shell("for p in $(ip netns pids " + ns + "); do kill -9 $p; done; ip netns del " + ns);
      std::filesystem::remove_all("/etc/netns/" + ns);
    }
  }
  const std::string& why_not() const { return why_not_; }

  // `unillm launch ARGS` started on host 1 (mpirun there), bounded by `timeout`: per_host
  // processes on each host (consecutive ranks, mpirun's placement by slot).
  testing::CliResult launch(const std::string& env, const std::string& args, int per_host = 1) const {
    const std::string hostfile = dir_ + "/hostfile" + std::to_string(per_host);
    std::ofstream(hostfile) << kHost[0] << " slots=" << per_host << "\n" << kHost[1] << " slots=" << per_host << "\n";
    const std::string line =
        "hostname " + std::string(kHost[0]) + " && exec env " + env + " timeout -k 5 120 " + kBin +
        " launch --nproc " + std::to_string(2 * per_host) + " --hostfile " + hostfile + " --mca plm_rsh_agent " + dir_ +
        "/agent.sh --mca btl_tcp_if_include 10.231.0.0/24 --mca oob_tcp_if_include 10.231.0.0/24 " +
        args;
    return run_shell("cd " + testing::source_path("") + " && ip netns exec " + ns_[0] +
                     " unshare --uts sh -c " + shell_quote(line));
  }

 private:
  std::string dir_, ns_[2], why_not_;
  std::vector<std::string> made_;
};

std::vector<std::pair<double, double>> figures(const std::string& dir) {
  std::vector<std::pair<double, double>> out;
  std::ifstream f(dir + "/trainer_log.jsonl");
  for (std::string l; std::getline(f, l);) {
    const auto j = nlohmann::json::parse(l);
    if (j.contains("loss")) out.emplace_back(j["loss"].get<double>(), j["grad_norm"].get<double>());
  }
  return out;
}

TEST(MultiHost, TwoNamespaceHostsOverTcpTrainAsOneHost) {
  const std::string dir = testing::temp_dir("multihost");
  TwoHosts hosts(dir);
  if (!hosts.why_not().empty()) GTEST_SKIP() << hosts.why_not();
  auto two = hosts.launch(
      "", "--mpirun-arg --display-map -- train " + kSft + " output_dir=" + dir + "/two" + kShort);
  ASSERT_EQ(two.exit_code, 0) << two.out << two.err;
  // One rank on each namespace host.
  EXPECT_NE(two.out.find(std::string("Data for node: ") + kHost[0]), std::string::npos) << two.out;
  EXPECT_NE(two.out.find(std::string("Data for node: ") + kHost[1]), std::string::npos) << two.out;
  EXPECT_NE(two.err.find("--mca btl self,tcp"), std::string::npos) << two.err;
  auto one =
      run_shell("cd " + testing::source_path("") + " && timeout -k 5 120 " + kBin +
                " launch --nproc 2 -- train " + kSft + " output_dir=" + dir + "/one" + kShort);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const auto a = figures(dir + "/one"), b = figures(dir + "/two");
  ASSERT_EQ(a.size(), 4u);
  // Two ranks' sums are a + b in either order: bit for bit where the GEMM's sums do not depend on
  // the thread count (a rank alone on its host runs more threads than two sharing one); elsewhere
  // to f32 rounding (tests/cli/run_compare_util.h).
  if (testing::shape_invariant_gemm())
    EXPECT_EQ(a, b);
  else
    testing::expect_runs_close(dir + "/one", dir + "/two", "two hosts");
}

// HF fsdp's hybrid_shard_zero2 (sharding within a host, replication across hosts): with two
// processes on each namespace host, each host's pair is a sharding group and the two hosts are
// replicas; the run is plain data parallelism's over 4 processes on one host, to f32 rounding.
TEST(MultiHost, HybridShardShardsWithinEachHost) {
  const std::string dir = testing::temp_dir("multihost_hybrid");
  TwoHosts hosts(dir);
  if (!hosts.why_not().empty()) GTEST_SKIP() << hosts.why_not();
  auto hybrid = hosts.launch("", "-- train " + kSft + " output_dir=" + dir + "/hybrid fsdp=hybrid_shard_zero2" + kShort,
                             /*per_host=*/2);
  ASSERT_EQ(hybrid.exit_code, 0) << hybrid.out << hybrid.err;
  EXPECT_NE(hybrid.err.find("sharding groups of each host's 2 processes, replicated over 2 hosts"), std::string::npos)
      << hybrid.err;
  EXPECT_NE(hybrid.err.find("(sharding groups of 2, 2 replicas)"), std::string::npos) << hybrid.err;
  auto one = run_shell("cd " + testing::source_path("") + " && timeout -k 5 120 " + kBin + " launch --nproc 4 -- train " +
                       kSft + " output_dir=" + dir + "/one" + kShort);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  ASSERT_EQ(figures(dir + "/one").size(), 4u);
  testing::expect_runs_close(dir + "/one", dir + "/hybrid", "hybrid_shard_zero2 on two hosts");
  // Stage 3 (hybrid_shard): each host's processes shard the parameters among themselves and gather
  // them on the host; the hosts' gradient shards are summed over TCP once a step.
  auto z3 = hosts.launch("", "-- train " + kSft + " output_dir=" + dir + "/hybrid3 fsdp=hybrid_shard" + kShort,
                         /*per_host=*/2);
  ASSERT_EQ(z3.exit_code, 0) << z3.out << z3.err;
  EXPECT_NE(z3.err.find("parameters, gradients and optimizer state sharded over 2 processes"), std::string::npos)
      << z3.err;
  EXPECT_NE(z3.err.find("(sharding groups of 2, 2 replicas)"), std::string::npos) << z3.err;
  testing::expect_runs_close(dir + "/one", dir + "/hybrid3", "hybrid_shard on two hosts");
  // Ranks placed round-robin over the hosts (--map-by node) are not consecutive per host: refused
  // on every rank, naming the placement.
  auto spread = hosts.launch("", "--mpirun-arg --map-by --mpirun-arg node -- train " + kSft + " output_dir=" + dir +
                                     "/spread fsdp=hybrid_shard_zero2" + kShort,
                             /*per_host=*/2);
  EXPECT_NE(spread.exit_code, 0);
  EXPECT_NE(spread.exit_code, 124) << "timed out: a process was left waiting";
  EXPECT_NE(spread.err.find("ranks in order run on: unillm-h1 1, unillm-h2 1, unillm-h1 1, unillm-h2 1"),
            std::string::npos)
      << spread.err;
}

TEST(MultiHost, ARankKilledOnTheSecondHostEndsTheJobAtOnce) {
  const std::string dir = testing::temp_dir("multihost_kill");
  TwoHosts hosts(dir);
  if (!hosts.why_not().empty()) GTEST_SKIP() << hosts.why_not();
  // Rank 1 (on unillm-h2) SIGKILLs itself in step 2; the timeout is long, Open MPI notices.
  const auto t0 = std::chrono::steady_clock::now();
  auto r = hosts.launch("UNILLM_TEST_KILL_RANK=1:6", "--dist-timeout 600 -- train " + kSft +
                                                         " output_dir=" + dir + "/out" + kShort);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_NE(r.exit_code, 124) << "the job hung until `timeout` ended it\n" << r.err;
  EXPECT_NE(r.err.find("process rank 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(std::string("on node ") + kHost[1]), std::string::npos) << r.err;
  EXPECT_LT(s, 60) << r.err;
}

TEST(MultiHost, ARankHungOnTheFirstHostIsReportedByTheSecondWithinTheTimeout) {
  const std::string dir = testing::temp_dir("multihost_hang");
  TwoHosts hosts(dir);
  if (!hosts.why_not().empty()) GTEST_SKIP() << hosts.why_not();
  // Rank 0 (unillm-h1) hangs; rank 1 on unillm-h2 — where the timeout arrived by `-x` — waits,
  // reports and exits, and its line reaches the user through mpirun.
  const auto t0 = std::chrono::steady_clock::now();
  auto r = hosts.launch("UNILLM_TEST_HANG_RANK=0", "--dist-timeout 3 -- train " + kSft +
                                                       " output_dir=" + dir + "/out" + kShort);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_NE(r.exit_code, 124) << "the job hung until `timeout` ended it\n" << r.err;
  EXPECT_NE(r.err.find("unillm: error: rank 1: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("did not complete within 3 s"), std::string::npos) << r.err;
  EXPECT_LT(s, 45) << r.err;
}

}  // namespace
}  // namespace unillm
