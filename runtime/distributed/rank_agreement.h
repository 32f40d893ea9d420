// runtime/distributed/rank_agreement.h - ranks that agree before they start: every rank states the
// terms its messages follow (the plan, the stage-to-rank map, each value that crosses ranks with
// its dtype and shape, the schedule, the microbatches, the steps, ...), the ranks exchange them
// through the rendezvous store, and any disagreement stops every rank at once, in one line naming
// two ranks and what differs. Without it, ranks on different plans or schedules wait on messages
// that never come until the timeout, and then name only a peer and a tag.
//
// Guarantees: every rank reaches the same verdict from the same exchanged texts, so all fail
// alike (ErrorCode::InvalidArgument: exit 1) or all go on; the verdict names the lowest rank
// that differs from rank 0 and the first of rank 0's terms where (else the first term rank 0
// lacks). No transport message is sent, so it works whatever the plans say.
// Complexity: O(ranks x terms' bytes) to compare, one store write and `ranks` store reads.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "base/expected.h"
#include "plan/plan_file.h"
#include "runtime/distributed/communicator.h"

namespace cleave::runtime::distributed {

// What a rank's messages depend on, in the order a disagreement is looked for: the most telling
// first (a schedule, a value's shape), the plan's digest (anything else in it) last.
class RankTerms {
public:
  void add(std::string what, std::string value);
  void append(const RankTerms& more); // `more`'s terms after these
  const std::vector<std::pair<std::string, std::string>>& terms() const { return terms_; }
  // Length-prefixed text, read back by parse (exchanged between ranks).
  std::string encode() const;
  // Fails: ParseError (not what encode writes).
  static Expected<RankTerms> parse(const std::string& text);

private:
  std::vector<std::pair<std::string, std::string>> terms_;
};

// The terms a plan fixes: its stages, which rank holds each, every value that crosses ranks (its
// dtype and dims, symbolic ones by name, from which stage to which), and a digest of the whole
// plan. `stageRanks[s]` is stage s's rank.
RankTerms planTerms(const plan::PlanFile& plan, const std::vector<int>& stageRanks);

// The verdict on every rank's terms (by rank): empty when all equal rank 0's, else the one line
// "ranks 0 and 2 disagree on the schedule: 1f1b on rank 0, interleaved on rank 2".
std::string firstDisagreement(const std::vector<RankTerms>& byRank);

// Collective on the world's communicator, before any message of the run: exchanges `terms`
// and fails on every rank alike when any rank's differ (firstDisagreement, with what each rank
// must hold alike). Returns the seconds it took. Fails: InvalidArgument (a disagreement), what
// Communicator::exchangeText fails with.
Expected<double> agreeBeforeStart(Communicator& comm, const RankTerms& terms);

} // namespace cleave::runtime::distributed
