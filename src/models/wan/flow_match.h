// The wan series' flow matching is the shared one (src/models/diffusion/flow_match.h).
#pragma once

#include "models/diffusion/flow_match.h"

namespace zeroshard::models::wan {

using diffusion::flow_match_schedule;
using diffusion::FlowMatchSchedule;

}  // namespace zeroshard::models::wan
