# frozen_string_literal: true

module Notifyd
  VERSION = "0.1.0"
end
