// Who a process is in a distributed job, read from each launcher's environment; SLURM's
// compressed node lists; the errors for environments that cannot be right.
#include <gtest/gtest.h>

#include "core/error.h"
#include "pipelines/distributed.h"

namespace tessel::pipelines {
namespace {

using Hosts = std::vector<std::string>;

std::string error_of(const Environment& env, bool need_master = true) {
  try {
    distributed_env(env, need_master);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(DistributedEnv, ReadsTorchrunsVariables) {
  const DistributedEnv d = distributed_env({{"RANK", "3"},
                                            {"WORLD_SIZE", "4"},
                                            {"LOCAL_RANK", "1"},
                                            {"MASTER_ADDR", "node01"},
                                            {"MASTER_PORT", "29400"}});
  EXPECT_EQ(d.source, "torchrun");
  EXPECT_EQ(d.rank, 3);
  EXPECT_EQ(d.world_size, 4);
  EXPECT_EQ(d.local_rank, 1);
  EXPECT_EQ(d.master_addr, "node01");
  EXPECT_EQ(d.master_port, 29400);
}

TEST(DistributedEnv, ReadsSlurmsVariablesAndTakesTheFirstHostOfTheNodeList) {
  const DistributedEnv d = distributed_env({{"SLURM_PROCID", "5"},
                                            {"SLURM_NTASKS", "8"},
                                            {"SLURM_LOCALID", "1"},
                                            {"SLURM_JOB_NODELIST", "gpu[07-09,12],login1"}});
  EXPECT_EQ(d.source, "slurm");
  EXPECT_EQ(d.rank, 5);
  EXPECT_EQ(d.world_size, 8);
  EXPECT_EQ(d.local_rank, 1);
  EXPECT_EQ(d.master_addr, "gpu07");
  EXPECT_EQ(d.master_port, 29500);
  // MASTER_ADDR/MASTER_PORT, when the batch script sets them, win.
  const DistributedEnv e = distributed_env({{"SLURM_PROCID", "0"},
                                            {"SLURM_NTASKS", "2"},
                                            {"SLURM_JOB_NODELIST", "gpu[07-08]"},
                                            {"MASTER_ADDR", "10.0.0.7"},
                                            {"MASTER_PORT", "12345"}});
  EXPECT_EQ(e.master_addr, "10.0.0.7");
  EXPECT_EQ(e.master_port, 12345);
}

TEST(DistributedEnv, ReadsOpenMpisVariablesWithMasterAddrGiven) {
  const DistributedEnv d = distributed_env({{"OMPI_COMM_WORLD_RANK", "1"},
                                            {"OMPI_COMM_WORLD_SIZE", "2"},
                                            {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                            {"MASTER_ADDR", "head"}});
  EXPECT_EQ(d.source, "openmpi");
  EXPECT_EQ(d.rank, 1);
  EXPECT_EQ(d.world_size, 2);
  EXPECT_EQ(d.master_addr, "head");
  EXPECT_EQ(d.master_port, 29500);
  // mpirun does not say where rank 0 is: without MASTER_ADDR only a file rendezvous works.
  const Environment no_master = {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}};
  EXPECT_NE(error_of(no_master).find("MASTER_ADDR"), std::string::npos) << error_of(no_master);
  EXPECT_EQ(distributed_env(no_master, /*need_master=*/false).world_size, 2);
}

TEST(DistributedEnv, TorchrunInsideASlurmJobIsTorchrun) {
  // torchrun per node under srun: SLURM's task numbers count launchers, not ranks.
  const DistributedEnv d = distributed_env({{"SLURM_PROCID", "1"},
                                            {"SLURM_NTASKS", "2"},
                                            {"SLURM_JOB_NODELIST", "n[1-2]"},
                                            {"RANK", "6"},
                                            {"WORLD_SIZE", "8"},
                                            {"LOCAL_RANK", "2"},
                                            {"MASTER_ADDR", "n1"},
                                            {"MASTER_PORT", "29500"}});
  EXPECT_EQ(d.source, "torchrun");
  EXPECT_EQ(d.rank, 6);
  EXPECT_EQ(d.world_size, 8);
}

TEST(DistributedEnv, RefusesMissingPartialAndContradictoryEnvironments) {
  const auto says = [](const Environment& env, const std::string& part) {
    const std::string message = error_of(env);
    EXPECT_NE(message.find(part), std::string::npos) << message;
  };
  says({}, "needs a launcher's environment");
  says({{"RANK", "0"}}, "WORLD_SIZE is not");
  says({{"WORLD_SIZE", "2"}}, "RANK is not");
  says({{"SLURM_NTASKS", "2"}}, "SLURM_PROCID");
  says({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}},
       "outside WORLD_SIZE=2");
  says({{"RANK", "-1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}},
       "outside");
  says({{"RANK", "x"}, {"WORLD_SIZE", "2"}}, "RANK='x' is not a whole number");
  says({{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "at least one process");
  says({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}}, "contradicts RANK=0");
  says({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}}, "MASTER_PORT is not");
  says({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "70000"}},
       "not a TCP port");
  says({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "n[1-"}},
       "unbalanced");
}

TEST(SlurmNodeList, ExpandsRangesListsPaddingAndSeveralBracketGroups) {
  EXPECT_EQ(expand_nodelist("node01"), Hosts{"node01"});
  EXPECT_EQ(expand_nodelist("node[01-04,07]"),
            (Hosts{"node01", "node02", "node03", "node04", "node07"}));
  EXPECT_EQ(expand_nodelist("a[8-11],b,c[3]"), (Hosts{"a8", "a9", "a10", "a11", "b", "c3"}));
  EXPECT_EQ(expand_nodelist("gpu[098-101]-ib"),
            (Hosts{"gpu098-ib", "gpu099-ib", "gpu100-ib", "gpu101-ib"}));
  EXPECT_EQ(expand_nodelist("r[1-2]n[1-2]"), (Hosts{"r1n1", "r1n2", "r2n1", "r2n2"}));
}

TEST(SlurmNodeList, RefusesMalformedLists) {
  for (const char* bad : {"node[01-04", "node01]", "node[04-01]", "node[a-b]", "a,,b", "n[1,]"}) {
    EXPECT_THROW(expand_nodelist(bad), Error) << bad;
  }
}

// Each rank of a node takes its own GPU where the config leaves the choice (auto, cuda), in
// turn where there are more ranks than GPUs; cuda:N and cpu are the config's.
TEST(DistributedEnv, EachRankOfANodeTakesItsOwnGpu) {
  EXPECT_EQ(rank_gpu("auto", 0, 8), 0);
  EXPECT_EQ(rank_gpu("auto", 5, 8), 5);
  EXPECT_EQ(rank_gpu("cuda", 3, 2), 1);
  EXPECT_EQ(rank_gpu("cuda:2", 5, 8), -1);
  EXPECT_EQ(rank_gpu("cpu", 1, 8), -1);
  EXPECT_EQ(rank_gpu("auto", 1, 0), -1);
}

}  // namespace
}  // namespace tessel::pipelines
