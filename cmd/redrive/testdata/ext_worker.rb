# A test worker on clients/ruby/redrive_worker.rb, with the handler of
# ext_worker.py: {"final": true} fails finally, {"rate": S} is rate limited
# with a Retry-After of S seconds the first time, {"flaky": K} fails
# retryably in its first K attempts, {"sleep": S} takes S seconds; the
# output is the input with "by": "ruby" and the attempt.
require "json"
require "set"
require_relative "../../../clients/ruby/redrive_worker"

pipeline, stage, concurrency, lease = ARGV
limited = Set.new
lock = Mutex.new
counts = RedriveWorker.work(pipeline, stage, concurrency: (concurrency || 8).to_i, lease: (lease || 30).to_f, grace: 5) do |job|
  x = job.input
  sleep(x["sleep"]) if x["sleep"]
  raise RedriveWorker::Final, "refused: the input asks to die" if x["final"]
  if x["rate"] && lock.synchronize { limited.add?(job.id) }
    raise RedriveWorker::RateLimited.new("429 from the test dependency", retry_after: x["rate"])
  end
  raise IOError, "connection reset by the test dependency" if job.attempt <= (x["flaky"] || 0)

  x.merge("by" => "ruby", "attempt" => job.attempt)
end
puts JSON.generate(counts)
$stdout.flush
