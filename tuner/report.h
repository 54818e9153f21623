// The tuning database as one self-contained HTML page (attune db report
// --html FILE): a summary, per device a table of the best variant of every
// problem key, and bar charts (inline SVG) of the measured variants and of
// the gain of tuning over the heuristic default. No scripts, fonts or other
// files are referenced, so the page opens anywhere, offline.
//
//   std::ofstream("report.html") << attune::tuner::html_report(db, "attune tuning report");
#pragma once

#include <optional>
#include <string>

#include "tuner/gains.h"
#include "tuning_db/tuning_db.h"

namespace attune::tuner {

// The page, for every device in `db`. `title` is escaped.
std::string html_report(const tuning_db::TuningDb& db, const std::string& title);

// `text` with & < > " ' replaced by entities, for HTML text and attributes.
std::string html_escape(const std::string& text);

}  // namespace attune::tuner
