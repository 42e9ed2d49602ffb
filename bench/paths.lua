-- wrk script of the objstore benchmark: one request per line of a paths file.
--
-- Arguments after "--":
--   <paths file> <method> <body file or "-"> <cycle|once> <thread count> <spare paths>
--   cycle: start again at the first path when the list ends (GETs of a fixed key set).
--   once:  send every path at most once (PUTs of new keys). When a thread has as many
--          responses as it has paths less its spares, it prints BENCH_EXHAUSTED and stops;
--          bench/wrk.py then ends the run early with SIGINT, so the measured duration is
--          the real one. The spares (one per connection, at the end of the file) feed the
--          connections still busy at that moment, so no key is ever written twice.
-- Thread k of n takes the lines whose number is k modulo n, so no path is sent twice.
-- done() prints one BENCH_JSON line that bench/wrk.py parses (times in microseconds).

local started = 0

function setup(thread)
   thread:set("thread_id", started)
   started = started + 1
end

local paths = {}
local method = "GET"
local body = nil
local once = false
local target = 0
local index = 0
local responses = 0
local finished = false

function init(args)
   local threads = tonumber(args[5]) or 1
   local number = 0
   for line in io.lines(args[1]) do
      if number % threads == (thread_id or 0) then
         paths[#paths + 1] = line
      end
      number = number + 1
   end
   method = args[2]
   if args[3] ~= "-" then
      local file = assert(io.open(args[3], "rb"))
      body = file:read("*a")
      file:close()
   end
   once = args[4] == "once"
   local spares = math.ceil((tonumber(args[6]) or 0) / threads)
   target = math.max(1, #paths - spares)
end

function request()
   index = index + 1
   if index > #paths then
      index = 1  -- once: only if the spares ran out, which one per connection prevents
   end
   return wrk.format(method, paths[index], nil, body)
end

function response(status, headers, response_body)
   if once and not finished then
      responses = responses + 1
      if responses >= target then
         finished = true
         io.write("BENCH_EXHAUSTED\n")
         io.flush()
         wrk.thread:stop()
      end
   end
end

function done(summary, latency, requests)
   local e = summary.errors
   io.write(string.format(
      'BENCH_JSON {"requests": %.0f, "duration_us": %.0f, "bytes": %.0f, ' ..
      '"p50_us": %.0f, "p99_us": %.0f, "max_us": %.0f, "errors_connect": %.0f, ' ..
      '"errors_read": %.0f, "errors_write": %.0f, "errors_status": %.0f, ' ..
      '"errors_timeout": %.0f}\n',
      summary.requests, summary.duration, summary.bytes,
      latency:percentile(50), latency:percentile(99), latency.max,
      e.connect, e.read, e.write, e.status, e.timeout))
end
