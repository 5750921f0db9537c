-- wrk script: 16 agents searching: GET one search path per request in turn, with one token.
-- BENCH_TOKEN is the agent token; BENCH_PATHS names a file of request paths, one a line.
local paths = {}
local index = 0
local token = os.getenv("BENCH_TOKEN")

init = function(args)
  for line in io.lines(os.getenv("BENCH_PATHS")) do
    if #line > 0 then table.insert(paths, line) end
  end
  index = math.random(#paths)
end

request = function()
  index = index % #paths + 1
  return wrk.format("GET", paths[index], {Authorization = "Bearer " .. token})
end

done = function(summary, latency, requests)
  io.write(string.format(
    "RESULT {\"requests\": %d, \"duration_us\": %d, \"p50_us\": %d, \"p95_us\": %d, " ..
    "\"p99_us\": %d, \"status_errors\": %d, \"socket_errors\": %d}\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(95),
    latency:percentile(99), summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
