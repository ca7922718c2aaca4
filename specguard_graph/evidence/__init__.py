"""Evidence at the step level: label steps offline and measure how well each signal separates
good steps from bad ones (docs/design.md, "Evidence")."""
