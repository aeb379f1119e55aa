# frozen_string_literal: true

require_relative "lib/notifyd/version"

Gem::Specification.new do |spec|
  spec.name = "notifyd"
  spec.version = Notifyd::VERSION
  spec.authors = ["The notifyd authors"]
  spec.summary = "Enqueue notifyd notifications inside your own PostgreSQL transaction (pg, ActiveRecord)."
  spec.description = "Notifyd.notify writes a notification in the application's own transaction, with pg or " \
                     "ActiveRecord: it commits or rolls back with the application's writes. Also cancel, " \
                     "subscribe, unsubscribe, put_recipient, recipient tokens and typed errors."
  spec.homepage = "https://github.com/notifyd/notifyd/tree/main/clients/ruby"
  spec.license = "MIT"
  spec.required_ruby_version = ">= 2.7"
  spec.metadata = {
    "homepage_uri" => spec.homepage,
    "source_code_uri" => "https://github.com/notifyd/notifyd",
    "documentation_uri" => "https://github.com/notifyd/notifyd/blob/main/docs/sql-enqueue.md",
    "bug_tracker_uri" => "https://github.com/notifyd/notifyd/issues",
  }
  spec.files = Dir[File.join(__dir__, "lib", "**", "*.rb")].map { |f| f.delete_prefix("#{__dir__}/") } + ["README.md"]
  spec.require_paths = ["lib"]
  spec.add_dependency "pg", ">= 1.1"
end
