package api

import "time"

// Image is an image as the API shows it.
type Image struct {
	Fingerprint  string    `json:"fingerprint"`
	Aliases      []string  `json:"aliases"`
	Size         int64     `json:"size"`
	Created      time.Time `json:"created"`
	Source       string    `json:"source"`
	OS           OS        `json:"os"`
	Architecture string    `json:"architecture,omitempty"`
	StopSignal   string    `json:"stop_signal,omitempty"`
	Init         []string  `json:"init,omitempty"`
}

// ImageBuildPost is POST /1.0/images/build: build an image on the host.
type ImageBuildPost struct {
	// Distro is "debian" (debootstrap) or "busybox" (rebuild the built-in).
	Distro string `json:"distro"`
	Suite  string `json:"suite,omitempty"`
	Mirror string `json:"mirror,omitempty"`
	Alias  string `json:"alias,omitempty"`
}

// ImageAliasHeader carries the alias of an uploaded image on POST /1.0/images.
const ImageAliasHeader = "X-Vessel-Image-Alias"
