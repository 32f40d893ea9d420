#include "runtime/distributed/rank_agreement.h"

#include <gtest/gtest.h>

namespace cleave::runtime::distributed {
namespace {

// Two stages whose seam carries h: [batch, width] float32.
plan::PlanFile twoStagePlan(std::int64_t width) {
  plan::PlanFile plan;
  plan::PlanFileSubmodule first, second;
  first.name = "submod_0";
  first.inputs = {{"x", "input"}};
  first.outputs = {"h"};
  second.name = "submod_1";
  second.inputs = {{"h", "submod_0"}};
  second.outputs = {"y"};
  plan.submodules = {first, second};
  plan::PlanFileValue h{"h", "tensor", "f32", true, {{-1, "batch"}, {width, ""}}, -1};
  plan.values = {h};
  return plan;
}

TEST(RankAgreement, TermsSurviveTheirTextAndMalformedTextFails) {
  RankTerms terms;
  terms.add("the schedule", "1f1b");
  terms.add("a value with: colons and\nnewlines", "");
  Expected<RankTerms> back = RankTerms::parse(terms.encode());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->terms(), terms.terms());
  EXPECT_FALSE(RankTerms::parse("12:the schedule"));
  EXPECT_FALSE(RankTerms::parse("x:y"));
  EXPECT_FALSE(RankTerms::parse("3:one"));
}

TEST(RankAgreement, PlanTermsNameTheValuesBetweenRanksWithTheirShapes) {
  const RankTerms apart = planTerms(twoStagePlan(64), {0, 1});
  bool found = false;
  for (const auto& [what, value] : apart.terms())
    if (what == "the value 'h' between ranks") {
      EXPECT_EQ(value, "f32[batch,64] from submod_0 to submod_1");
      found = true;
    }
  EXPECT_TRUE(found);
  // On one rank nothing crosses.
  const RankTerms together = planTerms(twoStagePlan(64), {0, 0});
  for (const auto& [what, value] : together.terms())
    EXPECT_EQ(what.find("the value"), std::string::npos) << what;
}

TEST(RankAgreement, TheVerdictNamesTheLowestDifferingRankAndTheFirstTerm) {
  auto withSchedule = [](const std::string& schedule, std::int64_t width) {
    RankTerms terms;
    terms.add("the schedule", schedule);
    terms.append(planTerms(twoStagePlan(width), {0, 1}));
    return terms;
  };
  EXPECT_EQ(firstDisagreement({withSchedule("1f1b", 64), withSchedule("1f1b", 64)}), "");
  EXPECT_EQ(firstDisagreement({withSchedule("1f1b", 64), withSchedule("1f1b", 64), withSchedule("interleaved", 64),
                               withSchedule("gpipe", 64)}),
            "ranks 0 and 2 disagree on the schedule: 1f1b on rank 0, interleaved on rank 2");
  EXPECT_EQ(firstDisagreement({withSchedule("1f1b", 64), withSchedule("1f1b", 32)}),
            "ranks 0 and 1 disagree on the value 'h' between ranks: f32[batch,64] from submod_0 to submod_1 on rank "
            "0, f32[batch,32] from submod_0 to submod_1 on rank 1");
  RankTerms fewer;
  fewer.add("the schedule", "1f1b");
  EXPECT_EQ(firstDisagreement({fewer, withSchedule("1f1b", 64)}).rfind("ranks 0 and 1 disagree on the plan's stages: "
                                                                        "none on rank 0, submod_0, submod_1 on rank 1",
                                                                        0),
            0u);
}

TEST(RankAgreement, OneProcessAgreesWithItself) {
  std::unique_ptr<Communicator> local = Communicator::local();
  RankTerms terms;
  terms.add("the schedule", "gpipe");
  Expected<double> seconds = agreeBeforeStart(*local, terms);
  ASSERT_TRUE(seconds);
  EXPECT_GE(*seconds, 0.0);
}

} // namespace
} // namespace cleave::runtime::distributed
