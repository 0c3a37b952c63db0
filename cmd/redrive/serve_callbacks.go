package main

import (
	"bytes"
	"os"
)

// envCallbackSecret names the environment variable that holds the callback
// secret when --callback-secret-file is not given.
const envCallbackSecret = "REDRIVE_CALLBACK_SECRET"

// loadCallbackSecret reads the secret that signs the callbacks of
// pipelines without a webhook: the file's content without surrounding
// white space, else the environment variable; nil when neither is set.
// The secret is never logged.
func loadCallbackSecret(file string) ([]byte, error) {
	if file == "" {
		if v := os.Getenv(envCallbackSecret); v != "" {
			return []byte(v), nil
		}
		return nil, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, flagErrorf("callback-secret-file", "%v", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil, flagErrorf("callback-secret-file", "%s is empty", file)
	}
	return b, nil
}

// callbackSigned reports whether the callbacks of pipeline's items would be
// signed here: by the callback secret, or by the pipeline's webhook.
func (g *workerGroup) callbackSigned(pipeline string) bool {
	if len(g.callbackSecret) > 0 {
		return true
	}
	// Not under g.mu, which a reload holds while attempts finish.
	hooked := g.hooked.Load()
	return hooked != nil && (*hooked)[pipeline]
}
