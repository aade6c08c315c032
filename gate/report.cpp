#include "gate/report.hpp"

#include <iomanip>
#include <sstream>

#include "gate/reproduce.hpp"

namespace gdnv::gate {
namespace {

std::string xml_escaped(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

std::string junit_xml(const std::vector<StepRow>& rows, double total) {
  int tests = 0, failures = 0, skipped = 0;
  std::ostringstream cases;
  cases << std::fixed << std::setprecision(3);
  for (const auto& row : rows) {
    const StepResult& r = row.result;
    const bool by_case = !r.failures.empty();
    ++tests;
    cases << "    <testcase classname=\"gate\" name=\"" << xml_escaped(row.name) << "\" time=\"" << row.seconds
          << "\">";
    if (!r.skip_reason.empty()) {
      ++skipped;
      cases << "<skipped message=\"" << xml_escaped(r.skip_reason) << "\"/>";
    } else if (r.failed && !by_case) {
      ++failures;
      cases << "<failure message=\"" << r.failed << " of " << r.cases << " cases failed\">"
            << xml_escaped(r.detail + "\nreproduce: " + gate_case_command(row.name, r.label)) << "</failure>";
    }
    cases << "<system-out>" << r.cases << " cases, " << r.failed << " failed</system-out></testcase>\n";
    for (const auto& f : r.failures) {
      ++tests, ++failures;
      const std::string command = f.reproduce.empty() ? gate_case_command(row.name, f.label) : f.reproduce;
      cases << "    <testcase classname=\"gate." << xml_escaped(row.name) << "\" name=\"" << xml_escaped(f.label)
            << "\" time=\"0\"><failure message=\"" << xml_escaped(f.why) << "\">"
            << xml_escaped("reproduce: " + command) << "</failure></testcase>\n";
    }
  }
  std::ostringstream x;
  x << std::fixed << std::setprecision(3) << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<testsuites name=\"gdn-verify gate\" tests=\"" << tests << "\" failures=\"" << failures << "\" skipped=\""
    << skipped << "\" time=\"" << total << "\">\n"
    << "  <testsuite name=\"gate\" tests=\"" << tests << "\" failures=\"" << failures << "\" skipped=\"" << skipped
    << "\" time=\"" << total << "\">\n"
    << cases.str() << "  </testsuite>\n</testsuites>\n";
  return x.str();
}

}  // namespace gdnv::gate
