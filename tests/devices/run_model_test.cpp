// Tests for the run model (devices/run_model.h): each mechanism against values worked out by
// hand (the arithmetic is in the comments) or against a Monte Carlo simulation of the
// failure process it stands for, never against its own formula restated.
#include "devices/run_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "devices/chip_file.h"

namespace titan::devices {
namespace TITAN_UNIT_ID {
namespace {

TEST(RunModel, YoungAndDalyIntervalsByHand) {
  // Save of 60 s, MTBF 2 h = 7200 s: Young sqrt(2 * 60 * 7200) = sqrt(864,000) = 929.516 s.
  EXPECT_NEAR(young_interval_s(60, 7200), 929.516, 1e-3);
  // Daly: x = 60 / 14,400 = 1/240, sqrt(x) = 0.0645497, 1 + 0.0645497 / 3 + (1/240) / 9
  // = 1.0219795; 929.516 * 1.0219795 - 60 = 889.946 s.
  EXPECT_NEAR(daly_interval_s(60, 7200), 889.946, 1e-2);
  // A save longer than twice the MTBF: save every MTBF.
  EXPECT_DOUBLE_EQ(daly_interval_s(500, 200), 200);
}

TEST(RunModel, DalyIntervalMinimisesTheExpectedWallTime) {
  // Scan the interval in 0.1% steps: the best wall time lies within 2% of Daly's interval,
  // and Daly's wall time is within 0.01% of the best (the optimum is flat).
  const double delta = 30, mtbf = 3000, restart = 200, work = 1e6;
  const double daly = daly_interval_s(delta, mtbf);
  double best_tau = 0, best = 1e300;
  for (double tau = 50; tau < 2000; tau *= 1.001) {
    const double w = expected_wall_s(work, tau, delta, restart, mtbf);
    if (w < best) best = w, best_tau = tau;
  }
  EXPECT_NEAR(best_tau / daly, 1.0, 0.02);
  EXPECT_LT(expected_wall_s(work, daly, delta, restart, mtbf) / best - 1, 1e-4);
}

TEST(RunModel, ExpectedWallTimeByHandAndAgainstMonteCarlo) {
  // No failures: 1000 s of work saved every 100 s for 10 s = 10 segments of 110 s.
  EXPECT_DOUBLE_EQ(expected_wall_s(1000, 100, 10, 300, 0), 1100);
  // 3600 s of work, saves every 600 s of 60 s, restart 300 s, MTBF 36,000 s:
  // 36,000 * e^(300/36,000) * (e^(660/36,000) - 1) * 6
  // = 36,000 * 1.0083682 * 0.0185024 * 6 = 4029.97 s.
  EXPECT_NEAR(expected_wall_s(3600, 600, 60, 300, 36000), 4029.97, 0.05);
  // Monte Carlo of the process it stands for: failures arrive at mean M during work, saves
  // and restarts alike; a failure loses the segment in progress (or the restart) and costs
  // a new restart; a segment is done when work and save pass with no failure.
  const double tau = 500, delta = 50, restart = 400, mtbf = 1500, work = 5000;
  std::mt19937_64 gen(7);
  std::exponential_distribution<double> next_failure(1 / mtbf);
  const int runs = 40000;
  double total = 0;
  for (int r = 0; r < runs; ++r) {
    double wall = 0;
    for (int seg = 0; seg < 10; ++seg) {
      double need = tau + delta;  // the segment, then (after a failure) restart + segment
      for (;;) {
        const double t = next_failure(gen);
        if (t >= need) {
          wall += need;
          break;
        }
        wall += t;
        need = restart + tau + delta;
      }
    }
    total += wall;
  }
  const double mc = total / runs;
  EXPECT_NEAR(expected_wall_s(work, tau, delta, restart, mtbf) / mc, 1.0, 0.01) << mc;
}

TEST(RunModel, ExpectedLostWorkByHandAndAgainstMonteCarlo) {
  // Failures rare against the segment: half of it is lost (T/2 = (900 + 100) / 2).
  EXPECT_NEAR(expected_lost_work_s(900, 100, 1e12), 500, 1e-3);
  EXPECT_NEAR(expected_lost_work_s(900, 100, 0, 40), 540, 1e-9);  // + the async lag
  // T = M = 3600: 3600 - 3600 / (e - 1) = 3600 - 3600 / 1.7182818 = 3600 - 2095.116 = 1504.884.
  EXPECT_NEAR(expected_lost_work_s(3000, 600, 3600), 1504.884, 1e-2);
  // Monte Carlo: the time of a failure that falls inside a segment of T = 1200 s, MTBF 800 s.
  std::mt19937_64 gen(11);
  std::exponential_distribution<double> fail(1 / 800.0);
  double sum = 0;
  int n = 0;
  while (n < 200000) {
    const double t = fail(gen);
    if (t < 1200) sum += t, ++n;
  }
  EXPECT_NEAR(expected_lost_work_s(1000, 200, 800) / (sum / n), 1.0, 0.005);
}

TEST(RunModel, StragglerExpectedMaximum) {
  EXPECT_NEAR(expected_max_step_factor(1, 0.05, 0, 0), 1.0, 1e-9);
  // E[max of 2 standard normals] = 1/sqrt(pi) = 0.5641896; of 3: 3 / (2 sqrt(pi)) = 0.8462844;
  // of 5: 1.1629644 (tables of normal order statistics).
  EXPECT_NEAR(expected_max_step_factor(2, 0.1, 0, 0), 1.05641896, 1e-6);
  EXPECT_NEAR(expected_max_step_factor(3, 0.1, 0, 0), 1.08462844, 1e-6);
  EXPECT_NEAR(expected_max_step_factor(5, 0.1, 0, 0), 1.11629644, 1e-6);
  // No jitter, 10% of chips 20% slow, 10 chips: 1 + 0.2 (1 - 0.9^10) = 1 + 0.2 * 0.6513216 = 1.1302643.
  EXPECT_NEAR(expected_max_step_factor(10, 0, 0.1, 0.2), 1.1302643, 1e-7);
  // 65,536 chips with 1% jitter: Monte Carlo of the maximum (300 steps; its standard error
  // is ~0.0002 here, the maximum of 65,536 normals varying by ~0.4 sigma).
  std::mt19937_64 gen(3);
  std::normal_distribution<double> z(0, 1);
  double sum = 0;
  for (int s = 0; s < 300; ++s) {
    double m = -1e9;
    for (int c = 0; c < 65536; ++c) m = std::max(m, z(gen));
    sum += 1 + 0.01 * m;
  }
  EXPECT_NEAR(expected_max_step_factor(65536, 0.01, 0, 0), sum / 300, 1.5e-3);
  // Jitter and slow chips together: Monte Carlo with 1,000 chips, 0.5% of them 5% slow.
  std::bernoulli_distribution slow(0.005);
  sum = 0;
  for (int s = 0; s < 4000; ++s) {
    double m = -1e9;
    for (int c = 0; c < 1000; ++c) m = std::max(m, 1 + 0.01 * z(gen) + (slow(gen) ? 0.05 : 0));
    sum += m;
  }
  EXPECT_NEAR(expected_max_step_factor(1000, 0.01, 0.005, 0.05), sum / 4000, 1e-3);
}

TEST(RunModel, SpareFreeProbability) {
  // P(Poisson(2) < 3) = e^-2 (1 + 2 + 2^2/2) = 5 e^-2 = 0.6766764.
  EXPECT_NEAR(spare_free_probability(3, 2), 0.6766764, 1e-7);
  EXPECT_EQ(spare_free_probability(0, 2), 0);
  EXPECT_EQ(spare_free_probability(4, 0), 1);
}

ChipSpec test_chip() {
  ChipSpec c;
  c.name = "test";
  c.chip_mtbf_s = 1000.0 * 3600;  // 1000 chips: the job fails once an hour
  c.scale_out_bytes_per_s = 1e10;
  c.host_link_bytes_per_s = 1e10;
  c.replace_chips = 1;
  return c;
}

// One hour of 1 s steps on 1000 test chips, no jitter.
RunSettings hour_of_steps() {
  RunSettings s;
  s.total_tokens = 3.6e9;  // 1e6 tokens a step of 1 s: 3600 steps, one hour of steps
  s.straggler_sigma = 0;
  s.storage_bytes_per_s = 1e12;  // 1e9 B/s per chip: a 1 GB shard saves in 1 s
  s.detect_s = 100, s.restart_s = 600, s.spare_restart_s = 100, s.spare_fraction = 0;
  return s;
}

TEST(RunModel, WholeRunByHand) {
  RunSettings s = hour_of_steps();
  RunStep step{1000, 1.0, 1e6, 1e9, false};
  const RunEstimate e = estimate_run(step, test_chip(), s);
  EXPECT_NEAR(e.job_mtbf_s, 3600, 1e-9);
  EXPECT_NEAR(e.ideal_s, 3600, 1e-9);
  // Daly at 1 s saves and 3600 s MTBF: x = 1/7200, sqrt(7200) * (1 + 0.0117851/3 + 0.000138889/9)
  // - 1 = 84.8528 * 1.0039438 - 1 = 84.187 s.
  EXPECT_NEAR(e.interval_s, 84.187, 1e-3);
  // Each failure: detect 100 + restart 600 (no spares) + load 1 = 701 s.
  EXPECT_NEAR(e.restart_per_failure_s, 701, 1e-9);
  // 3600 / 84.187 = 42.762 saves of 1 s.
  EXPECT_NEAR(e.checkpoint_s, 42.762, 1e-3);
  EXPECT_NEAR(e.ideal_s + e.straggler_s + e.checkpoint_s + e.restart_s + e.lost_s, e.wall_s, 1e-6 * e.wall_s);
  // 3600 e^(701/3600) (e^(85.187/3600) - 1) 3600 / 84.187 = 3600 * 1.2149734 * 0.0239454 * 42.7617 = 4478.6 s.
  EXPECT_NEAR(e.wall_s, 4478.6, 0.1);
  EXPECT_NEAR(e.goodput, 3600 / 4478.6, 1e-4);

  // Spares: 1000 chips failing once an hour, each out for 24 h: 24 out on average. 10 spares
  // (1%): P(Poisson(24) < 10) = 0.00043, they barely help; 100 (10%): one is almost always free.
  s.spare_fraction = 0.01;
  EXPECT_NEAR(estimate_run(step, test_chip(), s).spare_free, 0.00043, 1e-5);
  s.spare_fraction = 0.1;
  const RunEstimate spared = estimate_run(step, test_chip(), s);
  EXPECT_NEAR(spared.spare_free, 1.0, 1e-9);
  EXPECT_NEAR(spared.restart_per_failure_s, 201, 1e-6);  // detect 100 + swap 100 + load 1
  EXPECT_GT(spared.goodput, e.goodput);

  // Async: the copy to host (1e9 / 1e10 = 0.1 s) blocks; the 1 s write runs behind.
  s.spare_fraction = 0;
  step.async_checkpoint = true;
  const RunEstimate async = estimate_run(step, test_chip(), s);
  EXPECT_NEAR(async.checkpoint_block_s, 0.1, 1e-12);
  EXPECT_NEAR(async.durable_lag_s, 1.0, 1e-12);
  EXPECT_LT(async.checkpoint_s, e.checkpoint_s);

  // No failure rate and no jitter: nothing but the steps.
  ChipSpec perfect = test_chip();
  perfect.chip_mtbf_s = 0;
  step.async_checkpoint = false;
  EXPECT_DOUBLE_EQ(estimate_run(step, perfect, s).goodput, 1.0);
}

// dp_replicate: replicas hold the same shards and only the first writes them (titan's
// writes_tensors), so a save shares the storage among chips / replicas; a restart's load is
// read by every chip. Same run as WholeRunByHand.
TEST(RunModel, OnlyOneReplicaWritesCheckpoints) {
  const RunSettings s = hour_of_steps();
  RunStep step{1000, 1.0, 1e6, 1e9, false};
  step.replicas = 4;
  const RunEstimate e = estimate_run(step, test_chip(), s);
  // 250 writers: 1e12 / 250 = 4e9 B/s each (under the 1e10 link), 1e9 B in 0.25 s.
  EXPECT_NEAR(e.checkpoint_write_s, 0.25, 1e-12);
  EXPECT_NEAR(e.checkpoint_block_s, 0.25, 1e-12);
  // 1000 readers: 1e9 B/s each, 1 s; detect 100 + restart 600 + load 1.
  EXPECT_NEAR(e.checkpoint_load_s, 1.0, 1e-12);
  EXPECT_NEAR(e.restart_per_failure_s, 701, 1e-9);
  // Daly at 0.25 s saves and 3600 s MTBF: x = 0.25/7200, sqrt(1800) (1 + 0.0058926/3 + 3.4722e-5/9)
  // - 0.25 = 42.4264 * 1.0019681 - 0.25 = 42.260 s.
  EXPECT_NEAR(e.interval_s, 42.260, 1e-3);
  // One replica per chip: each writer has the whole storage, capped by its 1e10 B/s link.
  step.replicas = 1000;
  EXPECT_NEAR(estimate_run(step, test_chip(), s).checkpoint_write_s, 0.1, 1e-12);
  step.replicas = 3;  // 1000 chips are not 3 whole replicas
  EXPECT_THROW(estimate_run(step, test_chip(), s), std::exception);
}

TEST(RunModel, GoodputFallsWithChipCountOnCatalogChips) {
  RunSettings s;
  double last = 1;
  for (int64_t n : {1024, 8192, 65536}) {
    RunStep step{n, 2.0, 4e6 * static_cast<double>(n) / 1024, 2e9 * 1024 / static_cast<double>(n), true};
    const RunEstimate e = estimate_run(step, catalog_chip("b200"), s);
    EXPECT_TRUE(e.finishes);
    EXPECT_LT(e.goodput, last) << n;
    EXPECT_GT(e.goodput, 0.3) << n;
    last = e.goodput;
  }
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::devices
