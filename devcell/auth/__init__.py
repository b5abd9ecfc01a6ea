"""Who may do what: principals and their roles, the tokens that name them, and the policy.

A request reaches DevCell as a principal: a user with a role (viewer, developer, admin).
The direct CLI and the daemon's unix socket act as the state directory's owner, an admin
(principals.local_admin); an HTTP client presents a token (tokens.authenticate), which
names the user and role it was made for. Before acting, a caller asks the policy
(policy.authorize) whether that principal may apply a verb to a resource, and refuses with
errors.Forbidden naming the rule when it may not.

Modules: principals (Role, Principal, the local admin), tokens (the token store: create,
list, revoke, authenticate), policy (Verb, ResourceRef, Decision, authorize, require),
resources (the ResourceRef of a recorded cell or snapshot, or of a cell to create).
"""
