package redrive

// PublicAddrForTest exposes publicAddr to the external tests.
var PublicAddrForTest = publicAddr
