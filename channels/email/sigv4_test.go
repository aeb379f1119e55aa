package email

import (
	"bytes"
	"net/http"
	"testing"
	"time"
)

// The AWS Signature Version 4 test suite (aws-sig-v4-test-suite, published
// with the Signature Version 4 documentation): credentials AKIDEXAMPLE, region
// us-east-1, service "service", at 2015-08-30T12:36:00Z.
func TestSigV4Vectors(t *testing.T) {
	t.Parallel()
	creds := awsCredentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"}
	at := time.Date(2015, 8, 30, 12, 36, 0, 0, time.UTC)
	for _, c := range []struct {
		name, method, url, want string
	}{
		{"get-vanilla", "GET", "https://example.amazonaws.com/",
			"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"},
		{"get-vanilla-query-order-key-case", "GET", "https://example.amazonaws.com/?Param2=value2&Param1=value1",
			"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"},
		{"post-vanilla", "POST", "https://example.amazonaws.com/",
			"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, err := http.NewRequest(c.method, c.url, nil)
			if err != nil {
				t.Fatal(err)
			}
			signV4(req, nil, creds, "us-east-1", "service", at)
			if got := req.Header.Get("Authorization"); got != c.want {
				t.Errorf("Authorization =\n%s\nwant\n%s", got, c.want)
			}
			if got := req.Header.Get("X-Amz-Date"); got != "20150830T123600Z" {
				t.Errorf("X-Amz-Date = %q", got)
			}
		})
	}
}

// VerifySigV4 is what the SES fake checks: req (as a server received it,
// with body) carries the signature signV4 makes for the headers it names,
// with the secret key. It returns the request's Authorization and the one
// expected.
func VerifySigV4(req *http.Request, body []byte, accessKey, secret, region string) (got, want string) {
	got = req.Header.Get("Authorization")
	at, err := time.Parse("20060102T150405Z", req.Header.Get("X-Amz-Date"))
	if err != nil {
		return got, "X-Amz-Date " + err.Error()
	}
	_, signed, _ := bytes.Cut([]byte(got), []byte("SignedHeaders="))
	signed, _, _ = bytes.Cut(signed, []byte(","))
	clone, _ := http.NewRequest(req.Method, "http://"+req.Host+req.URL.RequestURI(), nil)
	for _, h := range bytes.Split(signed, []byte(";")) {
		if name := string(h); name != "host" && name != "x-amz-date" {
			clone.Header[http.CanonicalHeaderKey(name)] = req.Header.Values(name)
		}
	}
	signV4(clone, body, awsCredentials{AccessKeyID: accessKey, SecretAccessKey: secret,
		SessionToken: req.Header.Get("X-Amz-Security-Token")}, region, "ses", at)
	return got, clone.Header.Get("Authorization")
}
