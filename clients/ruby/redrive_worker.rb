# frozen_string_literal: true

# A redrive worker in Ruby, standard library only (net/http, json): it works
# an external stage of a pipeline served by `redrive serve`. It leases the
# stage's items over HTTP, runs your block on each in a pool of threads,
# heartbeats the leases while the block runs, and reports every result, in
# batches. redrive applies the stage's retry policy, rate limit, breaker and
# failure budget to those results as to a Go handler's.
#
#   require_relative "redrive_worker"
#
#   RedriveWorker.work("docs", "embed", concurrency: 8) do |job|   # job.input: the item's JSON input
#     raise RedriveWorker::Final, "no text" unless job.input["text"]          # dead at once
#     raise RedriveWorker::RateLimited.new("model quota", retry_after: 30) if quota_exceeded?
#     { "length" => job.input["text"].length }                                 # the output
#   end                                                                        # any other error: retryable
#
# The server's URL and a token with the work scope come from the keywords
# url: and token:, or REDRIVE_URL (default http://127.0.0.1:8080) and
# REDRIVE_TOKEN. On SIGTERM or SIGINT the worker stops leasing, lets running
# blocks finish for up to grace: seconds, reports their results and releases
# what did not finish. The protocol is in docs/workers.md.

require "json"
require "net/http"
require "socket"
require "uri"

module RedriveWorker
  # A failure no retry can fix: the item is dead at once, with the message as its reason.
  class Final < StandardError; end

  # The dependency asked to slow down: the item (and the stage) waits retry_after seconds.
  class RateLimited < StandardError
    attr_reader :retry_after

    def initialize(message = "rate limited", retry_after: nil)
      super(message)
      @retry_after = retry_after
    end
  end

  # A failure worth retrying after the policy's backoff (as is any other error).
  class Retryable < StandardError; end

  # Ends the leaser's long poll when the worker stops.
  class Stop < Exception; end # rubocop:disable Lint/InheritException

  # An answer of the server the worker cannot go on with.
  class APIError < StandardError
    attr_reader :status, :field

    def initialize(status, message, field = "")
      super("#{status}: #{message}#{field.to_s.empty? ? "" : " (field #{field})"}")
      @status = status
      @field = field
    end
  end

  # One leased item. traceparent and tracestate are the attempt's W3C Trace
  # Context ("" when none): your spans' parent (docs/tracing.md).
  Job = Struct.new(:id, :token, :key, :run, :pipeline, :stage, :attempt, :input, :timeout, :started,
                   :done, :lost, :traceparent, :tracestate, keyword_init: true) do
    def ref
      { "id" => id, "token" => token }
    end
  end

  # A keep-alive connection to the server.
  class Conn
    def initialize(url, token, timeout)
      @uri = URI(url)
      @token = token
      @timeout = timeout
      @http = nil
    end

    def post(path, body, timeout: @timeout)
      attempts = 0
      begin
        open_http if @http.nil?
        @http.read_timeout = timeout
        req = Net::HTTP::Post.new(@uri.path.chomp("/") + path, "Content-Type" => "application/json",
                                                               "Accept" => "application/json")
        req["Authorization"] = "Bearer #{@token}" unless @token.empty?
        req.body = JSON.generate(body)
        res = @http.request(req)
      rescue EOFError, Errno::ECONNRESET, Errno::EPIPE
        # A keep-alive connection the server closed: once more on a new one.
        close
        attempts += 1
        retry if attempts < 2
        raise
      end
      doc = begin
        res.body.to_s.empty? ? {} : JSON.parse(res.body)
      rescue JSON::ParserError
        { "error" => res.body.to_s[0, 200] }
      end
      [res.code.to_i, doc]
    end

    def open_http
      @http = Net::HTTP.new(@uri.host, @uri.port)
      @http.use_ssl = @uri.scheme == "https"
      @http.open_timeout = @timeout
      @http.keep_alive_timeout = 30
      @http.start
    end

    def close
      @http&.finish if @http&.started?
    rescue IOError
      nil
    ensure
      @http = nil
    end
  end

  # Works one external stage until stop (or SIGTERM/SIGINT in run).
  class Worker
    attr_reader :counts

    def initialize(pipeline, stage, concurrency: 8, url: nil, token: nil, batch: nil, wait: 30, lease: 30,
                   grace: 25, name: nil, timeout: 60, &handler)
      raise ArgumentError, "a block handles the items" unless handler

      @pipeline = pipeline
      @stage = stage
      @handler = handler
      @concurrency = [concurrency.to_i, 1].max
      @batch = [[(batch || @concurrency).to_i, 1].max, 1000].min
      @wait = [[wait.to_f, 0].max, 30].min
      @lease = [lease.to_f, 1].max
      @grace = grace
      @url = url || ENV.fetch("REDRIVE_URL", "http://127.0.0.1:8080")
      @token = token || ENV.fetch("REDRIVE_TOKEN", "")
      @name = name || "ruby:#{Socket.gethostname}:#{Process.pid}"
      @timeout = timeout
      @jobs = {} # [id, token] => Job: leased, result not yet reported
      @lock = Mutex.new
      @freed = ConditionVariable.new
      @busy = 0
      @todo = Queue.new
      @results = Queue.new
      @stopping = false
      @error = nil
      @counts = { "leased" => 0, "completed" => 0, "failed" => 0, "refused" => 0, "released" => 0 }
    end

    def stop
      @lock.synchronize do
        @stopping = true
        @freed.broadcast
      end
    end

    def stopping?
      @lock.synchronize { @stopping }
    end

    # Runs until stopped; SIGTERM and SIGINT stop it gracefully. Returns the counts.
    def run
      %w[TERM INT].each { |sig| Signal.trap(sig) { Thread.new { stop } } }
      handlers = Array.new(@concurrency) { Thread.new { handle_loop } }
      reporter = Thread.new { report_loop }
      beat = Thread.new { heartbeat_loop }
      leaser = Thread.new { lease_loop }
      sleep 0.2 until stopping?
      leaser.raise(Stop) unless leaser.join(0.5)
      leaser.join(@timeout)
      deadline = Time.now + @grace
      @lock.synchronize { @freed.wait(@lock, 0.1) while @busy.positive? && Time.now < deadline }
      handlers.each { @todo << nil }
      @results << nil
      reporter.join([deadline - Time.now + 5, 1].max)
      beat.kill
      left = @lock.synchronize do
        l = @jobs.values.reject(&:done).map(&:ref)
        @jobs.clear
        l
      end
      release(left)
      raise @error if @error

      @counts
    end

    private

    def release(refs)
      conn = Conn.new(@url, @token, @timeout)
      status, doc = conn.post("/api/v1/leases/release", { "worker" => @name, "leases" => refs, "leaving" => true })
      raise APIError.new(status, doc["error"], doc["field"]) unless status == 200

      @counts["released"] += refs.size
    rescue StandardError => e
      warn "redrive worker: releasing #{refs.size} leases failed (they return when they expire): #{e.message}"
    ensure
      conn&.close
    end

    def lease_loop
      conn = Conn.new(@url, @token, @timeout)
      failures = 0
      until stopping?
        want = @lock.synchronize do
          @freed.wait(@lock, 1) while !@stopping && @busy >= @concurrency
          n = [@concurrency - @busy, @batch].min
          @busy += n unless @stopping
          n
        end
        break if stopping?

        body = { "pipeline" => @pipeline, "stage" => @stage, "worker" => @name, "host" => Socket.gethostname,
                 "pid" => Process.pid, "max" => want, "wait" => @wait, "lease" => @lease }
        begin
          # A stop may interrupt the long poll (the server releases what it
          # hands out to a connection that went away), never the bookkeeping
          # of an answer received.
          status, doc = Thread.handle_interrupt(Stop => :never) do
            Thread.handle_interrupt(Stop => :immediate) { conn.post("/api/v1/leases", body, timeout: @wait + @timeout) }
          end
        rescue Stop
          conn.close
          unreserve(want)
          break
        rescue StandardError => e
          conn.close
          unreserve(want)
          failures += 1
          warn "redrive worker: lease failed: #{e.message}"
          sleep(backoff(failures))
          next
        end
        if status != 200
          unreserve(want)
          if status == 429 || status >= 500
            failures += 1
            sleep(backoff(failures))
            next
          end
          @error = APIError.new(status, doc["error"], doc["field"])
          warn "redrive worker: #{@error.message}"
          stop
          break
        end
        failures = 0
        Thread.handle_interrupt(Stop => :never) do
          jobs = (doc["leases"] || []).map { |d| new_job(d) }
          @lock.synchronize do
            jobs.each { |j| @jobs[[j.id, j.token]] = j }
            @counts["leased"] += jobs.size
            @busy -= want - jobs.size
            @freed.broadcast
          end
          jobs.each { |j| @todo << j }
        end
      end
    rescue Stop
      nil
    ensure
      conn&.close
    end

    def unreserve(n)
      @lock.synchronize do
        @busy -= n
        @freed.broadcast
      end
    end

    def backoff(failures)
      [5.0, 0.05 * (2**failures)].min * (0.5 + (rand / 2))
    end

    def new_job(d)
      input = d["input_encoding"] == "base64" ? d["input"].unpack1("m") : d["input"]
      Job.new(id: d["id"], token: d["token"], key: d["key"].to_s, run: d["run"], pipeline: d["pipeline"],
              stage: d["stage"], attempt: d["attempt"], input: input, timeout: d["timeout"],
              started: Process.clock_gettime(Process::CLOCK_MONOTONIC), done: false, lost: false,
              traceparent: d["traceparent"].to_s, tracestate: d["tracestate"].to_s)
    end

    def failure(job, cls, msg)
      { "id" => job.id, "token" => job.token, "class" => cls, "error" => msg }
    end

    def handle_loop
      while (job = @todo.pop)
        res = begin
          out = @handler.call(job)
          JSON.generate(out)
          [:complete, { "id" => job.id, "token" => job.token, "output" => out }]
        rescue Final => e
          [:fail, failure(job, "final", e.message)]
        rescue RateLimited => e
          f = failure(job, "rate_limited", e.message)
          f["retry_after"] = [e.retry_after.to_f, 0].max unless e.retry_after.nil?
          [:fail, f]
        rescue JSON::GeneratorError => e
          [:fail, failure(job, "final", "the handler's output is not JSON: #{e.message}")]
        rescue StandardError => e
          [:fail, failure(job, "retryable", e.is_a?(Retryable) ? e.message : "#{e.class}: #{e.message}")]
        end
        skip = @lock.synchronize do
          @busy -= 1
          @freed.broadcast
          s = job.done || job.lost
          job.done = true
          @jobs.delete([job.id, job.token]) if s
          s
        end
        @results << [job, res] unless skip
      end
    end

    def report_loop
      conn = Conn.new(@url, @token, @timeout)
      ending = false
      until ending
        first = @results.pop
        batch = first.nil? ? [] : [first]
        ending = first.nil?
        while batch.size < 1000 && !@results.empty?
          r = @results.pop
          if r.nil?
            ending = true
            break
          end
          batch << r
        end
        done, failed = batch.partition { |_, res| res[0] == :complete }
        send(conn, "/api/v1/leases/complete", "results", done, "completed") unless done.empty?
        send(conn, "/api/v1/leases/fail", "failures", failed, "failed") unless failed.empty?
      end
    ensure
      conn&.close
    end

    def send(conn, path, key, batch, counter)
      body = { "worker" => @name, key => batch.map { |_, res| res[1] } }
      failures = 0
      loop do
        status, doc = begin
          conn.post(path, body)
        rescue StandardError => e
          conn.close
          [0, { "error" => e.message }]
        end
        if [200, 409].include?(status)
          refused = (doc["results"] || []).reject { |r| r["applied"] }
          @lock.synchronize do
            @counts[counter] += batch.size - refused.size
            @counts["refused"] += refused.size
          end
          warn "redrive worker: #{refused.size} results refused: #{refused[0]["error"]}" unless refused.empty?
          break
        end
        failures += 1
        if (status >= 400 && status < 500 && status != 429) || failures > 50
          warn "redrive worker: reporting #{batch.size} results failed: #{status} #{doc["error"]}"
          break
        end
        sleep(backoff(failures))
      end
      @lock.synchronize { batch.each { |job, _| @jobs.delete([job.id, job.token]) } }
    end

    def heartbeat_loop
      conn = Conn.new(@url, @token, @timeout)
      interval = @lease / 3
      last = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      loop do
        sleep([interval, 1.0].min)
        now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        late = @lock.synchronize do
          l = @jobs.values.select { |j| !j.done && !j.lost && j.timeout && now > j.started + j.timeout }
          l.each { |j| j.done = true }
          l
        end
        late.each { |j| @results << [j, [:fail, failure(j, "retryable", "handler timed out after #{j.timeout}s")]] }
        next if now - last < interval

        last = now
        held = @lock.synchronize { @jobs.values.reject(&:lost) }
        held.each_slice(1000) do |part|
          status, doc = conn.post("/api/v1/leases/heartbeat", { "worker" => @name, "leases" => part.map(&:ref), "lease" => @lease })
          next unless [200, 409].include?(status)

          gone = (doc["results"] || []).reject { |r| r["applied"] }.map { |r| r["id"] }
          @lock.synchronize { part.each { |j| j.lost = true if gone.include?(j.id) } }
        rescue StandardError => e
          conn.close
          warn "redrive worker: heartbeat failed: #{e.message}"
        end
      end
    end
  end

  # Works an external stage until SIGTERM or SIGINT; returns the worker's counts.
  def self.work(pipeline, stage, concurrency: 8, **options, &handler)
    Worker.new(pipeline, stage, concurrency: concurrency, **options, &handler).run
  end
end
