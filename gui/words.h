// Counts in words: "1 annotation", "3 annotations". Qt's tr("%n …(s)") prints "(s)" as it
// stands without a translation file, which reads like a log line, not like the app talking.
#pragma once

#include <QString>

namespace tessel::gui {

inline QString counted(long long n, const QString& one, const QString& many) {
  return QString::number(n) + QLatin1Char(' ') + (n == 1 ? one : many);
}

}  // namespace tessel::gui
