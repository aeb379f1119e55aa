package main

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
)

// helperEnv makes the test binary act as the command withpg runs: it connects
// to TEST_DATABASE_URL and exits 0 only if that is the notifyd database.
const helperEnv = "WITHPG_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helper())
	}
	os.Exit(m.Run())
}

func helper() int {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, os.Getenv(envURL))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 10
	}
	defer conn.Close(ctx)
	var name string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 11
	}
	if name != "notifyd" {
		fmt.Fprintf(os.Stderr, "current_database() = %s, want notifyd\n", name)
		return 12
	}
	return 0
}

func TestRunStartsAClusterForTheCommand(t *testing.T) {
	t.Setenv(envURL, "")
	t.Setenv(helperEnv, "1")
	if code := run([]string{"--", os.Args[0]}); code != 0 {
		t.Fatalf("run(helper) = %d, want 0: the command could not use %s", code, envURL)
	}
}

func TestRunPassesTheExitStatusOn(t *testing.T) {
	t.Setenv(envURL, "postgres:///given")
	tests := []struct {
		args []string
		want int
	}{
		{[]string{"--", "sh", "-c", `test "$TEST_DATABASE_URL" = postgres:///given`}, 0},
		{[]string{"sh", "-c", "exit 3"}, 3},
		{[]string{"--", "sh", "-c", "kill -TERM $$"}, 128 + 15},
		{[]string{"--", "/nonexistent/command"}, 127},
		{[]string{"--"}, 2},
	}
	for _, tt := range tests {
		if got := run(tt.args); got != tt.want {
			t.Errorf("run(%q) = %d, want %d", tt.args, got, tt.want)
		}
	}
}
