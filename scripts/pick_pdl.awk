# Reads device_check's logs.txt; prints 0 when kernel_bench without programmatic dependent launch
# (kbnopdl) beat the default (kb) by > 2 % in geometric mean of the per-call graph times, else 1.
/^==== kb rc/ { s = "on"; k = 0; next }
/^==== kbnopdl rc/ { s = "off"; k = 0; next }
/^==== / { s = ""; next }
s != "" && /graph/ { for (i = 1; i <= NF; i++) if ($i == "graph") v[s, ++k] = $(i + 1); n[s] = k }
END {
  m = n["on"] < n["off"] ? n["on"] : n["off"]; g = 0
  for (k = 1; k <= m; k++) g += log(v["off", k] / v["on", k])
  print (m > 0 && exp(g / m) < 0.98) ? 0 : 1
}
