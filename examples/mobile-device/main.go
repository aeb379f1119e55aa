// Command mobile-device registers a phone with notifyd the way a mobile
// app does after the user signs in and grants notification permission: it
// posts the app install's push token (an APNs device token on iOS, an FCM
// registration token on Android) to POST /v1/devices with the user's
// recipient token, then lists the user's devices. With -delete it removes
// the device again, as the app does at sign-out.
//
//	go run ./examples/mobile-device -notifyd http://127.0.0.1:8080 -token "$RECIPIENT_TOKEN" \
//	    -platform ios -push-token 3f1c…e9 -app com.example.app
//
// The functions Register, List and Delete are what an app's networking
// code does, in Go.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// Device is what an app registers: its platform ("ios" or "android"), the
// push token the platform gave the app install, and the app (the iOS
// bundle id or the Android package name).
type Device struct {
	Platform string `json:"platform"`
	Token    string `json:"token"`
	App      string `json:"app"`
}

// Registered is a device as GET /v1/devices lists it.
type Registered struct {
	ID            string     `json:"id"`
	Platform      string     `json:"platform"`
	Token         string     `json:"token"`
	App           string     `json:"app"`
	CreatedAt     time.Time  `json:"created_at"`
	LastSuccessAt *time.Time `json:"last_success_at"`
	Failures      int        `json:"failures"`
}

// APIError is notifyd's error answer: {"error":{"code","message","details"}}.
// Field names the request field at fault, when the answer says.
type APIError struct {
	Status  int
	Code    string
	Message string
	Field   string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("notifyd: HTTP %d %s: %s", e.Status, e.Code, e.Message)
}

// Client talks to notifyd's recipient API as one recipient.
type Client struct {
	// Base is notifyd's URL ("http://127.0.0.1:8080").
	Base string
	// Token is the recipient token the app's backend minted for the user.
	Token string
	// HTTP is the client requests go through; nil is http.DefaultClient.
	HTTP *http.Client
}

// Register registers d for the client's recipient and returns its id, and
// whether it is new (false: the token was registered already, and the
// same device is returned: an app may register at every start).
func (c *Client) Register(ctx context.Context, d Device) (id string, created bool, err error) {
	var out struct {
		ID string `json:"id"`
	}
	status, err := c.do(ctx, http.MethodPost, "/v1/devices", d, &out)
	if err != nil {
		return "", false, err
	}
	return out.ID, status == http.StatusCreated, nil
}

// List returns the recipient's devices, oldest first.
func (c *Client) List(ctx context.Context) ([]Registered, error) {
	var out struct {
		Devices []Registered `json:"devices"`
	}
	_, err := c.do(ctx, http.MethodGet, "/v1/devices", nil, &out)
	return out.Devices, err
}

// Delete removes the recipient's device id (the app signs out).
func (c *Client) Delete(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/devices/"+url.PathEscape(id), nil, nil)
	return err
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) (int, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.Base, "/")+path, body)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode >= 400 {
		var e struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
				Details []struct {
					Field string `json:"field"`
				} `json:"details"`
			} `json:"error"`
		}
		apiErr := &APIError{Status: resp.StatusCode, Message: strings.TrimSpace(string(b))}
		if json.Unmarshal(b, &e) == nil && e.Error.Code != "" {
			apiErr.Code, apiErr.Message = e.Error.Code, e.Error.Message
			if len(e.Error.Details) > 0 {
				apiErr.Field = e.Error.Details[0].Field
			}
		}
		return resp.StatusCode, apiErr
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("notifyd: %s %s: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

func main() {
	base := flag.String("notifyd", "http://127.0.0.1:8080", "notifyd's URL")
	token := flag.String("token", os.Getenv("RECIPIENT_TOKEN"), "the user's recipient token (default $RECIPIENT_TOKEN)")
	platform := flag.String("platform", "ios", "ios or android")
	pushToken := flag.String("push-token", "", "the push token the platform gave the app install")
	app := flag.String("app", "com.example.app", "the iOS bundle id or Android package name")
	del := flag.String("delete", "", "remove the device with this id instead of registering one")
	flag.Parse()
	if err := run(context.Background(), &Client{Base: *base, Token: *token}, Device{Platform: *platform, Token: *pushToken, App: *app}, *del); err != nil {
		fmt.Fprintln(os.Stderr, err)
		var apiErr *APIError
		if errors.As(err, &apiErr) && apiErr.Status < 500 {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, c *Client, d Device, del string) error {
	if del != "" {
		if err := c.Delete(ctx, del); err != nil {
			return err
		}
		fmt.Println("deleted", del)
		return nil
	}
	id, created, err := c.Register(ctx, d)
	if err != nil {
		return err
	}
	if created {
		fmt.Println("registered", id)
	} else {
		fmt.Println("already registered", id)
	}
	devices, err := c.List(ctx)
	if err != nil {
		return err
	}
	for _, r := range devices {
		last := "never"
		if r.LastSuccessAt != nil {
			last = r.LastSuccessAt.Format(time.RFC3339)
		}
		fmt.Printf("%s  %-7s  %s  %s…  last push: %s\n", r.ID, r.Platform, r.App, r.Token[:min(12, len(r.Token))], last)
	}
	return nil
}
