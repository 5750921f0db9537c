-- wrk script: GET a path as many agents, one token (and maybe one ETag) per request in turn.
-- BENCH_TOKENS names a file of lines "<token> <etag>"; BENCH_ETAG=1 sends If-None-Match.
local entries = {}
local index = 0
local path = os.getenv("BENCH_PATH") or "/api/v1/catalogue"
local with_etag = os.getenv("BENCH_ETAG") == "1"

init = function(args)
  for line in io.lines(os.getenv("BENCH_TOKENS")) do
    local token, etag = line:match("^(%S+)%s+(.+)$")
    if token then table.insert(entries, {token = token, etag = etag}) end
  end
  index = math.random(#entries)
end

request = function()
  index = index % #entries + 1
  local entry = entries[index]
  local headers = {Authorization = "Bearer " .. entry.token}
  if with_etag then headers["If-None-Match"] = entry.etag end
  return wrk.format("GET", path, headers)
end

done = function(summary, latency, requests)
  io.write(string.format(
    "RESULT {\"requests\": %d, \"duration_us\": %d, \"p50_us\": %d, \"p95_us\": %d, " ..
    "\"status_errors\": %d, \"socket_errors\": %d}\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(95),
    summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
