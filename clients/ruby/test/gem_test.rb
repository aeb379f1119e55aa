# frozen_string_literal: true

require "test_helper"
require "fileutils"
require "open3"
require "rubygems/package"
require "tmpdir"

# The gem as a user installs it: `gem build`, then `gem install` of the .gem
# into an empty directory, offline, its pg dependency met by the system's,
# and required from there.
class GemTest < Minitest::Test
  ROOT = File.expand_path("..", __dir__)

  def test_builds_installs_and_loads
    Dir.mktmpdir("notifyd-gem-") do |dir|
      FileUtils.cp_r(Dir[File.join(ROOT, "{lib,README.md,notifyd.gemspec}")], dir)
      out, status = Open3.capture2e("gem", "build", "notifyd.gemspec", chdir: dir)
      assert status.success?, out
      gem = File.join(dir, "notifyd-#{Notifyd::VERSION}.gem")
      spec = Gem::Package.new(gem).spec
      assert_equal ["README.md", "lib/notifyd.rb", "lib/notifyd/version.rb"], spec.files.sort
      assert_equal "MIT", spec.license
      assert spec.metadata["source_code_uri"]
      # The README's route into a directory of its own, with the system's pg
      # (Debian's) satisfying the dependency: GEM_HOME, not --install-dir,
      # with which RubyGems ignores gems installed elsewhere.
      env = { "GEM_HOME" => File.join(dir, "gems"), "GEM_PATH" => nil, "RUBYLIB" => nil, "RUBYOPT" => nil }
      out, status = Open3.capture2e(env, "gem", "install", "--local", "--no-document", gem, chdir: dir)
      assert status.success?, out
      assert_equal ["notifyd-#{Notifyd::VERSION}"], Dir.children(File.join(dir, "gems", "gems")), "pg was installed again"
      out, status = Open3.capture2e(env, "ruby", "-e", 'gem "notifyd"; require "notifyd"; print $LOADED_FEATURES.grep(/notifyd\.rb/).first, " ", Notifyd::InputError.ancestors.include?(Notifyd::Error)', chdir: dir)
      assert status.success?, out
      where, ok = out.split
      assert where.start_with?(File.join(dir, "gems")), where
      assert_equal "true", ok
    end
  end

  def test_readme_stands_alone
    readme = File.read(File.join(ROOT, "README.md"))
    assert_equal [], readme.scan(%r{\]\((?!https://|#)([^)]*)\)}).flatten, "relative links break on the gem's page"
  end
end
