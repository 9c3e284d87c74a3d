// Package helm holds the tests of the hotsniff Helm chart (helm/hotsniff):
// they run the real helm CLI (lint, template) and decode every rendered
// manifest strictly into its Kubernetes API type. The chart itself is the
// directory hotsniff/ beside this file.
package helm
