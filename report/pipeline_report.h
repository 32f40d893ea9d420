// report/pipeline_report.h - what `cleave pipeline` prints and writes: the stages with their
// sums, tie groups, skip connections, the loss and the backward plan, as text and as the JSON
// object plan.json keeps under "pipeline". Deterministic; O(V + E + stages x parameters).
#pragma once

#include <string>

#include "base/json.h"
#include "pipeline/stages.h"

namespace cleave::report {

Json pipelineReportJson(const ir::Graph& graph, const pipeline::PipelinePlan& plan,
                        const pipeline::PipelineOptions& options);
std::string pipelineReportText(const ir::Graph& graph, const pipeline::PipelinePlan& plan,
                               const pipeline::PipelineOptions& options);

} // namespace cleave::report
