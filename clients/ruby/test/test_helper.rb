# frozen_string_literal: true

# What clients/clients_test.go gives the tests: a running notifyd, the
# database as the application's role (only notifyd_app, plus its own table
# comments) and as notifyd's owner (to check what was written).
require "minitest/autorun"
require "json"
require "net/http"
require "pg"
require "notifyd"

module TestEnv
  def self.need(name)
    ENV.fetch(name) { raise "#{name} is not set: run these tests through `go test ./clients/` (make test does)" }
  end

  APP_URL = need("NOTIFYD_TEST_APP_URL")
  OWNER_URL = need("NOTIFYD_TEST_DATABASE_URL")
  API = need("NOTIFYD_TEST_API")
  TOKEN_SECRET = need("NOTIFYD_TEST_TOKEN_SECRET")
  PARAMS = { post_title: "Hello", author_name: "Ada" }.freeze

  # scalar returns the first column of sql's first row, read as notifyd's owner.
  def self.scalar(sql, *args)
    conn = PG.connect(OWNER_URL)
    conn.exec_params(sql, args).values.dig(0, 0)
  ensure
    conn&.close
  end

  # wait_for polls (as the owner) until sql returns a row, for at most 30 s
  # (a fan-out on a loaded machine), and returns it.
  def self.wait_for(sql, *args)
    conn = PG.connect(OWNER_URL)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 30
    loop do
      row = conn.exec_params(sql, args).values.first
      return row if row
      raise "no row after 30 s: #{sql} #{args}" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

      sleep 0.05 # polling interval
    end
  ensure
    conn&.close
  end

  # ar_config is url as ActiveRecord's configuration hash (Ruby's URI
  # refuses a URL with a user and an empty host, a Unix socket's).
  def self.ar_config(url)
    keys = { "dbname" => :database, "user" => :username, "password" => :password, "host" => :host, "port" => :port }
    PG::Connection.conninfo_parse(url).each_with_object({ adapter: "postgresql" }) do |o, h|
      h[keys[o[:keyword]]] = o[:val] if keys[o[:keyword]] && o[:val]
    end
  end

  # inbox is GET /v1/inbox (?query when given) with token: the status and
  # the parsed body.
  def self.inbox(token, query = nil)
    uri = URI("#{API}/v1/inbox")
    res = Net::HTTP.start(uri.host, uri.port) do |http|
      http.get(query ? "#{uri.path}?#{query}" : uri.path, "Authorization" => "Bearer #{token}")
    end
    [res.code.to_i, res.code == "200" ? JSON.parse(res.body) : nil]
  end
end
